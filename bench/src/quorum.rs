//! The floors of quorum rounds, over 5 nodes, each round done as soon as a majority answered:
//! a Redlock round over 5 nodes needs 3 replies, so these are the least any 5-node lock can
//! cost here; the 5-node rows read against them.
//!
//! - [`QuorumPing`]: one `PING` round; the late replies are read after the clock stops,
//!   before the next sample: the floor of one round.
//! - [`QuorumFloor`]: the fenced floor's two scripts (`SET NX PX` and `INCR` of a fence, then
//!   the compare-and-delete), each round done at its quorum and the next one written at once,
//!   behind the replies the slower nodes still owe, as a 5-node lock sends them. On a machine
//!   whose servers share a CPU, the two late scripts of a round still take that CPU from the
//!   next round: this is the floor of a 5-node lock cycle there. Its replies are read as they
//!   arrive ([`Order::Arrival`]), as redmutex reads them from `redis://` servers, or node by
//!   node ([`Order::Nodes`]): the two rows tell what the reading order costs.
//!
//! Raw sockets and `poll(2)` on one thread, so the rows measure the network and the servers,
//! not hand-offs between threads. Every reply is checked, and is one line (`+PONG`, an
//! integer).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::lockers::TTL;
use crate::stats::ns;

/// How long one reply may take before the sample fails.
const TIMEOUT: Duration = Duration::from_secs(5);

/// What a reply must be.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Pong,
    /// An integer above zero (the fenced acquire's fence: it took the lock).
    Positive,
    /// The integer 1 (the compare-and-delete deleted the key).
    One,
}

impl Expect {
    fn check(self, line: &[u8]) -> Result<(), String> {
        let int = || {
            line.strip_prefix(b":")
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| n.parse::<i64>().ok())
        };
        let ok = match self {
            Expect::Pong => line == b"+PONG",
            Expect::Positive => int().is_some_and(|n| n > 0),
            Expect::One => int() == Some(1),
        };
        match ok {
            true => Ok(()),
            false => Err(format!(
                "reply {:?}, expected {self:?}",
                String::from_utf8_lossy(line)
            )),
        }
    }
}

/// The order a round's replies are read in.
#[derive(Clone, Copy, Debug)]
pub enum Order {
    /// As they arrive (`poll(2)`): the round ends with the quorum's third reply.
    Arrival,
    /// Node by node, a blocking read each, as a client must that cannot wait on every socket
    /// at once (redis-rs's blocking connections): the round ends when the first three nodes
    /// in that order have answered, whichever came first.
    Nodes,
}

/// One connection per node, and what each still owes.
struct Nodes {
    socks: Vec<std::net::TcpStream>,
    /// Per node: the replies still to come, oldest first.
    owed: Vec<VecDeque<Expect>>,
    /// Per node: the bytes of the reply being read.
    partial: Vec<Vec<u8>>,
    quorum: usize,
}

impl Nodes {
    /// One connection per node (`redis://HOST:PORT` URLs); the quorum is a majority.
    fn open(urls: &[String]) -> Result<Nodes, String> {
        let socks = urls
            .iter()
            .map(|u| {
                let addr = u
                    .strip_prefix("redis://")
                    .map(|a| a.trim_end_matches('/'))
                    .ok_or_else(|| format!("{u}: not a redis://HOST:PORT URL"))?;
                let s = std::net::TcpStream::connect(addr).map_err(|e| format!("{u}: {e}"))?;
                // As redmutex's own connections do: a command is one small write, sent at once.
                s.set_nodelay(true).map_err(|e| format!("{u}: {e}"))?;
                Ok(s)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let n = socks.len();
        Ok(Nodes {
            socks,
            owed: vec![VecDeque::new(); n],
            partial: vec![Vec::new(); n],
            quorum: n / 2 + 1,
        })
    }

    /// Writes `cmd` (a packed command) to every node, whose reply must be `expect`.
    fn send(&mut self, cmd: &[u8], expect: Expect) -> Result<(), String> {
        for (s, owed) in self.socks.iter_mut().zip(&mut self.owed) {
            s.write_all(cmd).map_err(|e| format!("write: {e}"))?;
            owed.push_back(expect);
        }
        Ok(())
    }

    /// Reads replies until a quorum of nodes has answered everything sent to them, in `order`.
    fn wait_quorum(&mut self, order: Order) -> Result<(), String> {
        match order {
            Order::Arrival => self.wait_for(self.quorum),
            Order::Nodes => {
                for i in 0..self.socks.len() {
                    if self.answered() >= self.quorum {
                        break;
                    }
                    while !self.owed[i].is_empty() {
                        self.read(i)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// How many nodes have answered everything sent to them.
    fn answered(&self) -> usize {
        self.owed.iter().filter(|o| o.is_empty()).count()
    }

    /// Reads replies until `want` nodes have answered everything sent to them.
    fn wait_for(&mut self, want: usize) -> Result<(), String> {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(self.socks.len());
        let mut idx: Vec<usize> = Vec::with_capacity(self.socks.len());
        while self.answered() < want {
            fds.clear();
            idx.clear();
            for (i, s) in self.socks.iter().enumerate() {
                if !self.owed[i].is_empty() {
                    fds.push(libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    idx.push(i);
                }
            }
            // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs, alive for the call.
            let rc = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    TIMEOUT.as_millis() as libc::c_int,
                )
            };
            match rc {
                0 => return Err(format!("no reply in {TIMEOUT:?}")),
                r if r < 0 => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(format!("poll: {e}"));
                }
                _ => {}
            }
            for (fd, &i) in fds.iter().zip(&idx) {
                if fd.revents != 0 {
                    self.read(i)?;
                }
            }
        }
        Ok(())
    }

    /// Reads what node `i` has sent (it is readable: a blocking read returns what has
    /// arrived without waiting) and checks each whole reply.
    fn read(&mut self, i: usize) -> Result<(), String> {
        let mut buf = [0u8; 256];
        let r = self.socks[i]
            .read(&mut buf)
            .map_err(|e| format!("read: {e}"))?;
        if r == 0 {
            return Err("a node closed the connection".into());
        }
        let partial = &mut self.partial[i];
        partial.extend_from_slice(&buf[..r]);
        while let Some(end) = partial.windows(2).position(|w| w == b"\r\n") {
            let expect = self.owed[i].pop_front().ok_or("a reply to nothing sent")?;
            expect.check(&partial[..end])?;
            partial.drain(..end + 2);
        }
        Ok(())
    }
}

/// `PING` written to every node, done when the quorum answered.
pub struct QuorumPing(Nodes);

impl QuorumPing {
    /// One connection per node (`redis://HOST:PORT` URLs); the quorum is a majority.
    pub fn open(urls: &[String]) -> Result<QuorumPing, String> {
        Nodes::open(urls).map(QuorumPing)
    }

    /// `n` samples: each writes `PING` to every node and stops the clock when the quorum's
    /// replies are in; then, untimed, it waits for the rest.
    pub fn samples(&mut self, n: usize) -> Result<Vec<u64>, String> {
        let ping = redis::cmd("PING").get_packed_command();
        let nodes = &mut self.0;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            nodes.send(&ping, Expect::Pong)?;
            nodes.wait_for(nodes.quorum)?;
            out.push(ns(t.elapsed()));
            nodes.wait_for(nodes.socks.len())?;
        }
        Ok(out)
    }
}

/// The fenced floor on every node, each round done at its quorum (see the module's text).
pub struct QuorumFloor {
    nodes: Nodes,
    order: Order,
    acquire: Vec<u8>,
    release: Vec<u8>,
}

impl QuorumFloor {
    /// Loads the fenced floor's scripts on every node (`key` free there) and packs its two
    /// requests, whose replies are read in `order`.
    pub fn open(urls: &[String], key: &str, order: Order) -> Result<QuorumFloor, String> {
        let floor = crate::uncontended::FencedFloor::scripts();
        for url in urls {
            let mut c = crate::uncontended::conn(url)?;
            for script in [&floor.0, &floor.1] {
                script
                    .prepare_invoke()
                    .load(&mut c)
                    .map_err(|e| format!("{url}: {e}"))?;
            }
            redis::cmd("DEL")
                .arg(key)
                .query::<()>(&mut c)
                .map_err(|e| format!("{url}: {e}"))?;
        }
        let token = "floor-token";
        let acquire = redis::cmd("EVALSHA")
            .arg(floor.0.get_hash())
            .arg(2)
            .arg(key)
            .arg(format!("{{{key}}}:fence"))
            .arg(token)
            .arg(TTL.as_millis() as u64)
            .get_packed_command();
        let release = redis::cmd("EVALSHA")
            .arg(floor.1.get_hash())
            .arg(1)
            .arg(key)
            .arg(token)
            .get_packed_command();
        Ok(QuorumFloor {
            nodes: Nodes::open(urls)?,
            order,
            acquire,
            release,
        })
    }

    /// `n` samples, one take and release each; the replies still owed after the last are
    /// read untimed, so that the rows measured next find the servers idle.
    pub fn samples(&mut self, n: usize) -> Result<Vec<u64>, String> {
        let nodes = &mut self.nodes;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            nodes.send(&self.acquire, Expect::Positive)?;
            nodes.wait_quorum(self.order)?;
            nodes.send(&self.release, Expect::One)?;
            nodes.wait_quorum(self.order)?;
            out.push(ns(t.elapsed()));
        }
        nodes.wait_for(nodes.socks.len())?;
        Ok(out)
    }
}
