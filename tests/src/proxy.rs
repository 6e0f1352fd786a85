//! A small TCP fault proxy in front of a real `redis-server`, for faults that a process signal
//! cannot make: requests swallowed, replies dropped, replies delayed.
//!
//! The proxy listens on `127.0.0.1:0` and opens one upstream connection per accepted client.
//! Its [`Mode`] can be switched at any time and applies to bytes as they arrive:
//!
//! - [`Mode::Pass`]: forward both ways.
//! - [`Mode::Blackhole`]: accept connections, but forward nothing and answer nothing (the
//!   requests never reach Redis).
//! - [`Mode::DropReplies`]: forward requests (Redis executes them), discard the replies.
//! - [`Mode::Delay`]: forward requests, deliver each reply this long after it arrived.
//!
//! Threads are bounded: one accept thread, and per connection one thread per direction plus
//! a reply writer; all poll a stop flag every few milliseconds and exit when the proxy is
//! dropped or either side closes.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often every proxy thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(5);
/// How many request arrival times are kept.
const MAX_ARRIVALS: usize = 4096;

/// What the proxy does with the bytes it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Accept, but never forward a request nor answer.
    Blackhole,
    /// Forward requests; discard every reply.
    DropReplies,
    /// Forward requests; deliver each reply this long after it arrived.
    Delay(Duration),
}

struct Shared {
    upstream: SocketAddr,
    mode: Mutex<Mode>,
    stop: AtomicBool,
    /// When request bytes arrived from clients (the latest `MAX_ARRIVALS`).
    arrivals: Mutex<Vec<Instant>>,
    /// Live connection threads, for tests of the proxy itself.
    threads: AtomicUsize,
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A fault proxy in front of one Redis; see the module documentation. Stops on drop.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`host:port`), in [`Mode::Pass`].
    pub fn start(upstream: &str) -> FaultProxy {
        let upstream: SocketAddr = upstream
            .parse()
            .unwrap_or_else(|e| panic!("bad upstream address {upstream:?}: {e}"));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream,
            mode: Mutex::new(Mode::Pass),
            stop: AtomicBool::new(false),
            arrivals: Mutex::new(Vec::new()),
            threads: AtomicUsize::new(0),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept_loop(&listener, &s))
            .expect("start the proxy thread");
        FaultProxy {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The proxy's listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode; applies to bytes arriving from now on.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap_or_else(|p| p.into_inner()) = mode;
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// The first time request bytes arrived from a client at or after `since`.
    pub fn first_request_since(&self, since: Instant) -> Option<Instant> {
        let arrivals = self
            .shared
            .arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        arrivals.iter().copied().filter(|t| *t >= since).min()
    }

    /// How many connection threads are running.
    pub fn threads(&self) -> usize {
        self.shared.threads.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("mode", &self.mode())
            .finish()
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopped() {
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(e) = serve(client, shared) {
                    eprintln!("fault proxy: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                eprintln!("fault proxy: accept: {e}");
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Starts the threads of one proxied connection.
fn serve(client: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(1))?;
    for s in [&client, &server] {
        s.set_read_timeout(Some(POLL))?;
        s.set_nodelay(true)?;
    }
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        let s = Arc::clone(shared);
        s.threads.fetch_add(1, Ordering::SeqCst);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                f();
                s.threads.fetch_sub(1, Ordering::SeqCst);
            })
            .map(drop)
    };
    // Requests: client -> server.
    let (from, to, s) = (client.try_clone()?, server.try_clone()?, Arc::clone(shared));
    spawn(
        "fault-proxy-req",
        Box::new(move || {
            pump(&from, &to, &s, true, |s, bytes, to| {
                let mut arrivals = s.arrivals.lock().unwrap_or_else(|p| p.into_inner());
                if arrivals.len() >= MAX_ARRIVALS {
                    arrivals.remove(0);
                }
                arrivals.push(Instant::now());
                drop(arrivals);
                match s.mode() {
                    Mode::Blackhole => Ok(()),
                    _ => to.write_all(bytes),
                }
            })
        }),
    )?;
    // Replies: server -> (writer) -> client.
    let (from, to, s) = (server.try_clone()?, client.try_clone()?, Arc::clone(shared));
    spawn(
        "fault-proxy-rep",
        Box::new(move || {
            pump(&from, &to, &s, false, |s, bytes, _| {
                let at = match s.mode() {
                    Mode::Pass => Instant::now(),
                    Mode::Delay(d) => Instant::now() + d,
                    Mode::Blackhole | Mode::DropReplies => return Ok(()),
                };
                tx.send((at, bytes.to_vec()))
                    .map_err(|_| io::Error::other("reply writer gone"))
            })
        }),
    )?;
    let s = Arc::clone(shared);
    spawn(
        "fault-proxy-out",
        Box::new(move || {
            let mut client = client;
            loop {
                if s.stopped() {
                    break;
                }
                match rx.recv_timeout(POLL) {
                    Ok((at, bytes)) => {
                        // Sleep in small steps, so that a drop of the proxy ends the wait.
                        while let Some(left) = at.checked_duration_since(Instant::now()) {
                            if s.stopped() {
                                return;
                            }
                            std::thread::sleep(left.min(POLL));
                        }
                        if client.write_all(&bytes).is_err() {
                            break;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            let _ = client.shutdown(Shutdown::Both);
        }),
    )?;
    Ok(())
}

/// Reads `from` until EOF, an error or the stop flag, handing each chunk to `forward`; then
/// ends the stream (`from` for reading, and `to` for writing when `close_to`: the reply
/// writer closes the client itself once it delivered what is queued).
fn pump(
    mut from: &TcpStream,
    mut to: &TcpStream,
    shared: &Shared,
    close_to: bool,
    mut forward: impl FnMut(&Shared, &[u8], &mut &TcpStream) -> io::Result<()>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    while !shared.stopped() {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if forward(shared, &buf[..n], &mut to).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    // Requests already forwarded are executed by Redis before it sees the end of stream.
    if close_to {
        let _ = to.flush();
        let _ = to.shutdown(Shutdown::Write);
    }
    let _ = from.shutdown(Shutdown::Read);
}
