//! A small TCP fault proxy in front of a real `redis-server`, for faults that a process signal
//! cannot make: requests swallowed, delayed, repeated or cut off from their replies; replies
//! dropped or delayed.
//!
//! The proxy listens on `127.0.0.1:0` and opens one upstream connection per accepted client.
//! It forwards whole commands (a read that ends inside one waits for the rest). Its [`Mode`]
//! can be switched at any time and applies to commands and replies as they arrive:
//!
//! - [`Mode::Pass`]: forward both ways.
//! - [`Mode::Blackhole`]: accept connections, but forward nothing and answer nothing (the
//!   requests never reach Redis): *a reply that never comes*, for a request that never ran.
//! - [`Mode::DropReplies`]: forward requests (Redis executes them), discard the replies:
//!   *a reply that never comes*, for a request that ran.
//! - [`Mode::Delay`]: forward requests, deliver each reply this long after it arrived.
//! - [`Mode::DelayRequests`]: hold each request this long before Redis sees it, and deliver
//!   it even when the client gave up and closed its connection meanwhile: *a request that
//!   arrives after its sender gave up* (Redis runs it, and nobody reads the reply).
//! - [`Mode::DelayRequestsWith`]: the same, only for requests whose bytes contain a needle
//!   (one kind of request on a node that answers the others at once: *a node slow on the
//!   second request of a call*); the requests behind a held one wait behind it, in order.
//! - [`Mode::Duplicate`]: forward each request, and send it once more on a new connection of
//!   its own: *a retry of something that already ran* (Redis runs it twice; the client sees
//!   one reply).
//! - [`Mode::CutAfterRequest`]: forward the request, then close the client's connection
//!   before any reply reaches it: *a reply that never comes*, for a request that ran, seen by
//!   the client as a dropped connection rather than as silence.
//! - [`Mode::ResetAfterRequest`]: the same, but the client's connection is reset (an abortive
//!   close, `RST`) rather than closed: *a reset between the poll and the write*, where the
//!   client's next write on it fails at once instead of going out into a closed connection.
//! - [`Mode::CutThenBlackhole`]: cut after the next request, as [`Mode::CutAfterRequest`],
//!   and turn into [`Mode::Blackhole`] at that moment: *a node that ran a request and then
//!   went out of reach*, with no window in which a retry could get through.
//!
//! Threads are bounded: one accept thread; per connection one thread per direction plus a
//! writer each way; one short-lived thread per duplicated request. All poll a stop flag every
//! few milliseconds and exit when the proxy is dropped or either side closes.
//!
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod resp;
#[cfg(test)]
mod tests;

/// How often every proxy thread looks at the stop flag.
const POLL: Duration = Duration::from_millis(5);
/// How many request arrival times are kept.
const MAX_ARRIVALS: usize = 4096;
/// How long a duplicated request's own connection waits for Redis to answer and close.
const DUPLICATE_WAIT: Duration = Duration::from_secs(2);

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
    /// Deliver each request this long after it arrived, even after the client closed.
    DelayRequests(Duration),
    /// [`Mode::DelayRequests`] for the requests that contain these bytes; the others pass
    /// (behind a held request, in order).
    DelayRequestsWith(&'static [u8], Duration),
    /// Forward each request, and send it again on a new connection.
    Duplicate,
    /// Forward each request, then close the client's connection before a reply reaches it.
    CutAfterRequest,
    /// Forward each request, then reset the client's connection (`RST`).
    ResetAfterRequest,
    /// Forward the next request, cut its connection, and from then on forward nothing.
    CutThenBlackhole,
    /// Close the client's connection as each request arrives, and deliver the request this
    /// long after (Redis runs what reached its socket): the client learns at once that its
    /// request may have run and that nothing can follow it, and it runs late.
    CutThenDelayRequests(Duration),
}

struct Shared {
    upstream: SocketAddr,
    /// Whether requests are found in the bytes (RESP); otherwise each read is one request.
    framed: bool,
    mode: Mutex<Mode>,
    stop: AtomicBool,
    /// When request bytes arrived from clients (the latest `MAX_ARRIVALS`).
    arrivals: Mutex<Vec<Instant>>,
    /// Live connection threads, for tests of the proxy itself.
    threads: AtomicUsize,
    /// Requests sent again on a connection of their own ([`Mode::Duplicate`]).
    duplicated: AtomicUsize,
    /// Connections closed after a request, before its reply ([`Mode::CutAfterRequest`]).
    cut: AtomicUsize,
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
        FaultProxy::start_framed(upstream, true)
    }

    /// Starts a proxy to `upstream` that forwards bytes as they come, without finding the
    /// commands in them: for TLS, whose bytes are no RESP. Each read counts as one request;
    /// [`Mode::Pass`], [`Mode::Delay`] and [`Mode::Blackhole`] keep a TLS session whole
    /// (the modes that repeat or cut a request break it).
    pub fn start_opaque(upstream: &str) -> FaultProxy {
        FaultProxy::start_framed(upstream, false)
    }

    fn start_framed(upstream: &str, framed: bool) -> FaultProxy {
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
            framed,
            mode: Mutex::new(Mode::Pass),
            stop: AtomicBool::new(false),
            arrivals: Mutex::new(Vec::new()),
            threads: AtomicUsize::new(0),
            duplicated: AtomicUsize::new(0),
            cut: AtomicUsize::new(0),
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

    /// One proxy in front of each of `servers`, in their order.
    pub fn in_front_of(servers: &[crate::RedisServer]) -> Vec<FaultProxy> {
        servers
            .iter()
            .map(|s| FaultProxy::start(&s.addr()))
            .collect()
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

    /// The first time a whole request arrived from a client at or after `since` (the mode
    /// that applies to it was read before this time was published).
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

    /// How many requests were sent again ([`Mode::Duplicate`]).
    pub fn duplicated(&self) -> usize {
        self.shared.duplicated.load(Ordering::SeqCst)
    }

    /// How many connections were cut after a request ([`Mode::CutAfterRequest`]).
    pub fn cut(&self) -> usize {
        self.shared.cut.load(Ordering::SeqCst)
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

/// What to do once a request was written to Redis.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    Nothing,
    /// Send it again on a new connection.
    Duplicate,
    /// Close the client's connection (before any reply reaches it) and Redis's.
    Cut,
    /// Reset the client's connection (an abortive close) and close Redis's.
    Reset,
}

/// Starts the threads of one proxied connection.
fn serve(client: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(1))?;
    for s in [&client, &server] {
        s.set_read_timeout(Some(POLL))?;
        s.set_nodelay(true)?;
    }
    // Set once a request was cut off: no reply reaches the client after that.
    let cut = Arc::new(AtomicBool::new(false));
    let (req_tx, req_rx) = mpsc::channel::<(Instant, (Vec<u8>, After))>();
    let (rep_tx, rep_rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    // Requests: client -> (writer) -> server.
    let (from, s, c) = (client.try_clone()?, Arc::clone(shared), Arc::clone(&cut));
    spawn(shared, "fault-proxy-req", move || {
        let mut pending = Vec::new();
        pump(&from, &s, |s, bytes| {
            pending.extend_from_slice(bytes);
            let n = match s.framed {
                true => resp::complete(&pending),
                false => pending.len(),
            };
            if n == 0 {
                return Ok(());
            }
            // The mode that applies is read before the arrival is published: a test that saw
            // a request arrive and then switches the mode knows the request met the mode from
            // before (read after, a proxy thread paused between the two lines let a request
            // seen arriving blackholed through to Redis).
            let mode = s.mode();
            note_arrival(s);
            let bytes: Vec<u8> = pending.drain(..n).collect();
            let now = Instant::now();
            let (at, then) = match mode {
                Mode::Blackhole => return Ok(()),
                Mode::Pass | Mode::DropReplies | Mode::Delay(_) => (now, After::Nothing),
                Mode::DelayRequests(d) => (now + d, After::Nothing),
                Mode::DelayRequestsWith(needle, d) if contains(&bytes, needle) => {
                    (now + d, After::Nothing)
                }
                Mode::DelayRequestsWith(..) => (now, After::Nothing),
                Mode::Duplicate => (now, After::Duplicate),
                Mode::CutAfterRequest => {
                    c.store(true, Ordering::SeqCst);
                    (now, After::Cut)
                }
                Mode::ResetAfterRequest => {
                    c.store(true, Ordering::SeqCst);
                    (now, After::Reset)
                }
                Mode::CutThenBlackhole => {
                    *s.mode.lock().unwrap_or_else(|p| p.into_inner()) = Mode::Blackhole;
                    c.store(true, Ordering::SeqCst);
                    (now, After::Cut)
                }
                Mode::CutThenDelayRequests(d) => {
                    c.store(true, Ordering::SeqCst);
                    s.cut.fetch_add(1, Ordering::SeqCst);
                    let _ = from.shutdown(Shutdown::Both);
                    (now + d, After::Nothing)
                }
            };
            req_tx
                .send((at, (bytes, then)))
                .map_err(|_| io::Error::other("request writer gone"))
        });
    })?;
    let (to, back, s) = (server.try_clone()?, client.try_clone()?, Arc::clone(shared));
    spawn(shared, "fault-proxy-fwd", move || {
        write_requests(&req_rx, to, back, &s);
    })?;
    // Replies: server -> (writer) -> client.
    let (from, s, c) = (server.try_clone()?, Arc::clone(shared), Arc::clone(&cut));
    spawn(shared, "fault-proxy-rep", move || {
        pump(&from, &s, |s, bytes| {
            let at = match s.mode() {
                _ if c.load(Ordering::SeqCst) => return Ok(()),
                Mode::Delay(d) => Instant::now() + d,
                Mode::Blackhole | Mode::DropReplies => return Ok(()),
                _ => Instant::now(),
            };
            rep_tx
                .send((at, bytes.to_vec()))
                .map_err(|_| io::Error::other("reply writer gone"))
        });
    })?;
    let s = Arc::clone(shared);
    spawn(shared, "fault-proxy-out", move || {
        let mut client = client;
        while let Some(bytes) = next_due(&rep_rx, &s) {
            if client.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = client.shutdown(Shutdown::Both);
    })?;
    Ok(())
}

/// Starts one counted proxy thread.
fn spawn(shared: &Arc<Shared>, name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let s = Arc::clone(shared);
    s.threads.fetch_add(1, Ordering::SeqCst);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            f();
            s.threads.fetch_sub(1, Ordering::SeqCst);
        })
        .map(drop)
}

/// Whether `needle` occurs in `bytes`.
fn contains(bytes: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || bytes.windows(needle.len()).any(|w| w == needle)
}

fn note_arrival(s: &Shared) {
    let mut arrivals = s.arrivals.lock().unwrap_or_else(|p| p.into_inner());
    if arrivals.len() >= MAX_ARRIVALS {
        arrivals.remove(0);
    }
    arrivals.push(Instant::now());
}

/// The next queued item once it is due; `None` when the queue ended or the proxy stopped.
fn next_due<T>(rx: &Receiver<(Instant, T)>, s: &Shared) -> Option<T> {
    loop {
        if s.stopped() {
            return None;
        }
        match rx.recv_timeout(POLL) {
            Ok((at, item)) => {
                // Sleep in small steps, so that a drop of the proxy ends the wait.
                while let Some(left) = at.checked_duration_since(Instant::now()) {
                    if s.stopped() {
                        return None;
                    }
                    std::thread::sleep(left.min(POLL));
                }
                return Some(item);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Writes the requests to Redis as they fall due, also after the client closed (its queue
/// ends then, once everything in it was delivered); then ends Redis's side of the stream, so
/// that Redis runs what it got and closes.
fn write_requests(
    rx: &Receiver<(Instant, (Vec<u8>, After))>,
    mut server: TcpStream,
    client: TcpStream,
    s: &Arc<Shared>,
) {
    while let Some((bytes, then)) = next_due(rx, s) {
        if server.write_all(&bytes).is_err() {
            break;
        }
        match then {
            After::Nothing => {}
            After::Duplicate => {
                if spawn(s, "fault-proxy-dup", {
                    let s = Arc::clone(s);
                    move || duplicate(&bytes, &s)
                })
                .is_err()
                {
                    break;
                }
            }
            After::Cut => {
                s.cut.fetch_add(1, Ordering::SeqCst);
                let _ = client.shutdown(Shutdown::Both);
                break;
            }
            After::Reset => {
                s.cut.fetch_add(1, Ordering::SeqCst);
                // With a zero linger time, the close of the socket's last descriptor resets
                // the connection; the shutdown makes every thread of this connection stop
                // within one poll and drop its descriptor.
                let linger = libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                // SAFETY: setsockopt on a socket we own, with a pointer to a live `linger` of
                // the size passed.
                unsafe {
                    libc::setsockopt(
                        std::os::fd::AsRawFd::as_raw_fd(&client),
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&raw const linger).cast(),
                        std::mem::size_of::<libc::linger>() as libc::socklen_t,
                    );
                }
                let _ = client.shutdown(Shutdown::Both);
                break;
            }
        }
    }
    let _ = server.flush();
    let _ = server.shutdown(Shutdown::Write);
}

/// Sends `bytes` to Redis on a connection of its own, reads (and drops) whatever comes back
/// until Redis closes it (bounded by [`DUPLICATE_WAIT`]).
fn duplicate(bytes: &[u8], s: &Shared) {
    let Ok(mut conn) = TcpStream::connect_timeout(&s.upstream, Duration::from_secs(1)) else {
        return;
    };
    if conn.write_all(bytes).is_err() {
        return;
    }
    s.duplicated.fetch_add(1, Ordering::SeqCst);
    let _ = conn.shutdown(Shutdown::Write);
    let _ = conn.set_read_timeout(Some(POLL));
    let end = Instant::now() + DUPLICATE_WAIT;
    let mut buf = [0u8; 4096];
    while Instant::now() < end && !s.stopped() {
        if read_some(&conn, &mut buf).is_none() {
            break;
        }
    }
}

/// One read: `Some(bytes read)` (0 when nothing came within the socket's timeout), or
/// `None` once the stream ended or failed.
fn read_some(mut from: &TcpStream, buf: &mut [u8]) -> Option<usize> {
    match from.read(buf) {
        Ok(0) => None,
        Ok(n) => Some(n),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
            ) =>
        {
            Some(0)
        }
        Err(_) => None,
    }
}

/// Reads `from` until EOF, an error or the stop flag, handing each chunk to `forward`; then
/// ends `from` for reading. (Ending the other side is the writers' job: they deliver what is
/// queued first.)
fn pump(
    from: &TcpStream,
    shared: &Shared,
    mut forward: impl FnMut(&Shared, &[u8]) -> io::Result<()>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    while !shared.stopped() {
        match read_some(from, &mut buf) {
            None => break,
            Some(0) => {}
            Some(n) => {
                if forward(shared, &buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Read);
}
