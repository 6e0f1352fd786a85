//! The floor of a quorum round: `PING` written to every node, done as soon as a majority
//! answered. A Redlock round over 5 nodes needs 3 replies, so this is the least any 5-node
//! lock can cost here; the 5-node rows read against it.
//!
//! Raw sockets and `poll(2)` on one thread, so the row measures the network and the servers,
//! not hand-offs between threads. The late replies are read after the timed part, before the
//! next sample.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::stats::ns;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";
/// How long one reply may take before the sample fails.
const TIMEOUT: Duration = Duration::from_secs(5);

pub struct QuorumPing {
    socks: Vec<std::net::TcpStream>,
    /// How many bytes of the current reply each node has sent.
    got: Vec<usize>,
    quorum: usize,
}

impl QuorumPing {
    /// One connection per node (`redis://HOST:PORT` URLs); the quorum is a majority.
    pub fn open(urls: &[String]) -> Result<QuorumPing, String> {
        let socks = urls
            .iter()
            .map(|u| {
                let addr = u
                    .strip_prefix("redis://")
                    .map(|a| a.trim_end_matches('/'))
                    .ok_or_else(|| format!("{u}: not a redis://HOST:PORT URL"))?;
                let s = std::net::TcpStream::connect(addr).map_err(|e| format!("{u}: {e}"))?;
                // As redis-rs does: a command is one small write, sent at once.
                s.set_nodelay(true).map_err(|e| format!("{u}: {e}"))?;
                Ok(s)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let n = socks.len();
        Ok(QuorumPing {
            socks,
            got: vec![0; n],
            quorum: n / 2 + 1,
        })
    }

    /// `n` samples: each writes `PING` to every node and stops the clock when the quorum's
    /// replies are in; then, untimed, it waits for the rest.
    pub fn samples(&mut self, n: usize) -> Result<Vec<u64>, String> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            self.got.fill(0);
            let t = Instant::now();
            for s in &mut self.socks {
                s.write_all(PING).map_err(|e| format!("write PING: {e}"))?;
            }
            self.wait_for(self.quorum)?;
            out.push(ns(t.elapsed()));
            self.wait_for(self.socks.len())?;
        }
        Ok(out)
    }

    /// Reads replies until `want` nodes have sent a whole `+PONG`.
    fn wait_for(&mut self, want: usize) -> Result<(), String> {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(self.socks.len());
        let mut idx: Vec<usize> = Vec::with_capacity(self.socks.len());
        while self.answered() < want {
            fds.clear();
            idx.clear();
            for (i, s) in self.socks.iter().enumerate() {
                if self.got[i] < PONG.len() {
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
                0 => return Err(format!("no PING reply in {TIMEOUT:?}")),
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
                if fd.revents == 0 {
                    continue;
                }
                let mut buf = [0u8; 16];
                let want_bytes = PONG.len() - self.got[i];
                // Readable: a blocking read returns what has arrived without waiting.
                let r = self.socks[i]
                    .read(&mut buf[..want_bytes])
                    .map_err(|e| format!("read PING reply: {e}"))?;
                if r == 0 {
                    return Err("a node closed the connection".into());
                }
                if buf[..r] != PONG[self.got[i]..self.got[i] + r] {
                    return Err(format!(
                        "unexpected PING reply {:?}",
                        String::from_utf8_lossy(&buf[..r])
                    ));
                }
                self.got[i] += r;
            }
        }
        Ok(())
    }

    fn answered(&self) -> usize {
        self.got.iter().filter(|&&g| g == PONG.len()).count()
    }
}
