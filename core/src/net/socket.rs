//! The socket under a connection of our own: TCP (`redis://`, `rediss://`) or a Unix socket
//! (`unix://`). Both are read and written the same way, and both can be waited on with
//! `poll(2)`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::wake;

/// A connection's socket, TCP or Unix, with the timeouts it was last given.
///
/// A timeout reaches the kernel (`setsockopt`, a system call) only when a read or write
/// must wait, and only when it differs from the one the kernel has: the caller sets a
/// timeout before every request, but most writes go out at once (a request of a few hundred
/// bytes into an empty send buffer), and a read often finds its reply already received (the
/// acquire pipelined behind a wait comes with the wait's own reply). On the hand-off's path
/// that saved the releaser and the woken waiter one system call each. (The connection above
/// rounds timeouts to whole milliseconds and passes on only a changed one, `conn.rs`, for
/// redis-rs's connections too; what it passes on waits here until a wait needs it.)
pub(crate) struct Socket {
    stream: Stream,
    /// The read timeout set last, in ns ([`NO_TIMEOUT`]: none): a watched read bounds its
    /// wait by it, and asking the kernel (`getsockopt`) would cost a system call per read.
    read_timeout: Timeout,
    write_timeout: Timeout,
}

/// A timeout as set (`wanted`) and as the kernel has it (`applied`), in ns ([`NO_TIMEOUT`]:
/// none, as a new socket has).
struct Timeout {
    wanted: AtomicU64,
    applied: AtomicU64,
}

impl Timeout {
    fn new() -> Timeout {
        Timeout {
            wanted: AtomicU64::new(NO_TIMEOUT),
            applied: AtomicU64::new(NO_TIMEOUT),
        }
    }

    /// Records `dur` for the next wait. Refuses a zero duration, as the kernel's setter does.
    fn set(&self, dur: Option<Duration>) -> io::Result<()> {
        if dur == Some(Duration::ZERO) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        self.wanted.store(ns_of(dur), Ordering::Relaxed);
        Ok(())
    }

    fn get(&self) -> Option<Duration> {
        match self.wanted.load(Ordering::Relaxed) {
            NO_TIMEOUT => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Gives the kernel the timeout set last, before a wait, unless it has it already.
    fn apply(&self, set: impl FnOnce(Option<Duration>) -> io::Result<()>) -> io::Result<()> {
        self.apply_ns(self.wanted.load(Ordering::Relaxed), set)
    }

    /// Gives the kernel `ns` ([`NO_TIMEOUT`]: none), unless it has it already.
    fn apply_ns(
        &self,
        ns: u64,
        set: impl FnOnce(Option<Duration>) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.applied.load(Ordering::Relaxed) != ns {
            set((ns != NO_TIMEOUT).then(|| Duration::from_nanos(ns)))?;
            self.applied.store(ns, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// [`Socket::read_timeout`] when reads have no timeout.
const NO_TIMEOUT: u64 = u64::MAX;

/// A timeout in ns ([`NO_TIMEOUT`]: none). A timeout of 2^64 ns or more (585 years) is as
/// good as none.
fn ns_of(dur: Option<Duration>) -> u64 {
    dur.map_or(NO_TIMEOUT, |d| {
        u64::try_from(d.as_nanos()).unwrap_or(NO_TIMEOUT)
    })
}

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Socket {
    fn new(stream: Stream) -> Socket {
        Socket {
            stream,
            read_timeout: Timeout::new(),
            write_timeout: Timeout::new(),
        }
    }

    /// A TCP socket (with no read timeout yet).
    pub(crate) fn tcp(s: TcpStream) -> Socket {
        Socket::new(Stream::Tcp(s))
    }

    /// A Unix socket (with no read timeout yet).
    #[cfg(unix)]
    pub(crate) fn unix(s: UnixStream) -> Socket {
        Socket::new(Stream::Unix(s))
    }

    /// The server end of the connection, as text (`host:port`, or a Unix socket's path):
    /// two connections with the same one reach the same server process, unless it was
    /// restarted (which breaks every connection to the old one).
    pub(crate) fn peer(&self) -> Option<String> {
        match &self.stream {
            Stream::Tcp(s) => s.peer_addr().ok().map(|a| a.to_string()),
            #[cfg(unix)]
            Stream::Unix(s) => s
                .peer_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string())),
        }
    }

    /// Bounds each wait of a read that follows (until set again).
    pub(crate) fn set_read_timeout(&self, dur: Option<Duration>) -> io::Result<()> {
        self.read_timeout.set(dur)
    }

    /// The read timeout set last.
    fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout.get()
    }

    /// Bounds each wait of a write that follows (until set again).
    pub(crate) fn set_write_timeout(&self, dur: Option<Duration>) -> io::Result<()> {
        self.write_timeout.set(dur)
    }

    /// The read timeout the kernel has.
    #[cfg(test)]
    pub(super) fn kernel_read_timeout(&self) -> io::Result<Option<Duration>> {
        match &self.stream {
            Stream::Tcp(s) => s.read_timeout(),
            #[cfg(unix)]
            Stream::Unix(s) => s.read_timeout(),
        }
    }

    /// Gives the kernel `dur` as its read timeout, before a read that may wait, unless it
    /// has it already.
    fn apply_read_timeout(&self, dur: Option<Duration>) -> io::Result<()> {
        self.read_timeout
            .apply_ns(ns_of(dur), |dur| match &self.stream {
                Stream::Tcp(s) => s.set_read_timeout(dur),
                #[cfg(unix)]
                Stream::Unix(s) => s.set_read_timeout(dur),
            })
    }

    /// A read of the socket itself, waiting as long as the kernel's read timeout allows.
    fn kernel_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.stream {
            Stream::Tcp(s) => (&*s).read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => (&*s).read(buf),
        }
    }

    /// A read on a thread whose wake-up setting is not armed yet nor due (see `wake.rs`):
    /// the read waits on the socket alone, `grace` at most, where a `poll` before it would
    /// cost one system call more for every reply. `grace` stays the same from read to read,
    /// so the kernel is not asked to change its timeout each time; so a read that began late
    /// in the setting's grace may arm it up to one `grace` late. `None` when the reply did
    /// not come within `grace` (short of the read's own timeout), or a signal interrupted the
    /// read (the setting is armed then, for the signal's handler): the watched read goes on.
    fn read_unarmed(&self, buf: &mut [u8], grace: Duration) -> Option<io::Result<usize>> {
        let timeout = self.read_timeout();
        let slice = timeout.map_or(grace, |t| t.min(grace));
        if let Err(e) = self.apply_read_timeout(Some(slice)) {
            return Some(Err(e));
        }
        match self.kernel_read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => wake::arm_now(),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && Some(slice) != timeout => {}
            read => return Some(read),
        }
        None
    }

    /// Gives the kernel the write timeout, before a write that may wait.
    fn apply_write_timeout(&self) -> io::Result<()> {
        self.write_timeout.apply(|dur| match &self.stream {
            Stream::Tcp(s) => s.set_write_timeout(dur),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(dur),
        })
    }

    /// Writes what the send buffer takes now, without waiting; `None` when it takes nothing
    /// yet (or where this is not done), and the write must wait.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn write_now(&self, buf: &[u8]) -> Option<io::Result<usize>> {
        use rustix::net::{SendFlags, send};
        match send(self, buf, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::AGAIN) => None,
            sent => Some(sent.map_err(Into::into)),
        }
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn write_now(&self, _: &[u8]) -> Option<io::Result<usize>> {
        None
    }

    pub(crate) fn shutdown(&self) -> io::Result<()> {
        match &self.stream {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            #[cfg(unix)]
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        }
    }
}

impl Read for &Socket {
    /// On a thread that watches every wait (see `wake.rs`), the read first waits for the
    /// socket or the thread's wake-up descriptor, within the read timeout; while that
    /// watching is not armed yet, the read waits by itself, one grace at most, and only then
    /// watched (see `read_unarmed`).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsFd;
        let mut timeout = self.read_timeout();
        if let Some(grace) = wake::unarmed_grace() {
            let began = std::time::Instant::now();
            if let Some(read) = self.read_unarmed(buf, grace) {
                return read;
            }
            timeout = timeout.map(|t| t.saturating_sub(began.elapsed()));
        }
        wake::ready(self.as_fd(), false, || Ok(timeout))?;
        // What is left of the read's timeout after a wait in `read_unarmed`, or all of it.
        self.apply_read_timeout(timeout)?;
        self.kernel_read(buf)
    }
}

impl Write for &Socket {
    /// Without waiting when the send buffer has room (no timeout to give the kernel then);
    /// otherwise a write that waits within the write timeout.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(sent) = self.write_now(buf) {
            return sent;
        }
        self.apply_write_timeout()?;
        match &self.stream {
            Stream::Tcp(s) => (&*s).write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => (&*s).write(buf),
        }
    }

    /// One `writev` for several buffers (rustls writes its records this way), as the streams
    /// themselves do.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.apply_write_timeout()?;
        match &self.stream {
            Stream::Tcp(s) => (&*s).write_vectored(bufs),
            #[cfg(unix)]
            Stream::Unix(s) => (&*s).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(unix)]
impl std::os::fd::AsFd for Socket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match &self.stream {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

/// Connects to `addr` within `timeout`. On a thread that watches every wait (see `wake.rs`),
/// the connect is made without blocking and waited for with the thread's wake-up descriptor
/// (or its call's stop flag): it ends, as timed out, when the wait stops.
pub(crate) fn connect_tcp(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    if !wake::watches() {
        return TcpStream::connect_timeout(addr, timeout);
    }
    use rustix::net::{AddressFamily, SocketFlags, SocketType, connect, socket_with, sockopt};
    use std::os::fd::AsFd;
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd = socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    match connect(&fd, addr) {
        Ok(()) => {}
        Err(rustix::io::Errno::INPROGRESS) => {
            wake::ready(fd.as_fd(), true, || Ok(Some(timeout)))?;
            sockopt::socket_error(&fd)??;
        }
        Err(e) => return Err(e.into()),
    }
    rustix::io::ioctl_fionbio(&fd, false)?;
    Ok(TcpStream::from(fd))
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::Socket;

    /// A socket connected to a peer that accepts and never reads or writes.
    fn silent_peer() -> (Socket, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = Socket::tcp(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
        let (peer, _) = listener.accept().unwrap();
        (sock, peer)
    }

    /// Runs `f` on a thread and returns what it did, or fails when it did not end in 10 s
    /// (a wait the timeout did not bound).
    fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the wait outlived its timeout")
    }

    #[test]
    fn a_write_that_must_wait_ends_at_its_timeout() {
        let (sock, _peer) = silent_peer();
        sock.set_write_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let failed = bounded(move || {
            // Written without waiting until the buffers are full, then waited for.
            let chunk = vec![0u8; 1 << 16];
            loop {
                if let Err(e) = (&sock).write(&chunk) {
                    return e.kind();
                }
            }
        });
        assert!(
            matches!(failed, ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{failed:?}"
        );
    }

    #[test]
    fn a_read_ends_at_its_timeout_and_reads_what_comes_after() {
        let (sock, mut peer) = silent_peer();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let (sock, failed) = bounded(move || {
            let failed = (&sock).read(&mut [0; 16]).map_err(|e| e.kind());
            (sock, failed)
        });
        assert!(
            matches!(failed, Err(ErrorKind::WouldBlock | ErrorKind::TimedOut)),
            "{failed:?}"
        );
        peer.write_all(b"+OK\r\n").unwrap();
        let mut buf = [0; 16];
        let n = bounded(move || (&sock).read(&mut buf).map(|n| buf[..n].to_vec()));
        assert_eq!(n.unwrap(), b"+OK\r\n");
    }

    /// Reads on a thread whose wake-up setting is not armed yet (Python's calls), with
    /// `grace`; `true` in the flag once the setting was armed (with nothing to watch).
    fn unarmed<T>(grace: Duration, f: impl FnOnce() -> T) -> (T, bool) {
        let armed = std::rc::Rc::new(std::cell::Cell::new(false));
        let seen = std::rc::Rc::clone(&armed);
        let arm = Box::new(move || {
            seen.set(true);
            None
        });
        let out = super::wake::scoped_later(grace, arm, f);
        (out, armed.get())
    }

    /// A reply that comes within the grace is read by one blocking read with the grace as the
    /// kernel's timeout: no `poll` before it, and no new timeout given to the kernel per read.
    #[test]
    fn an_unarmed_read_waits_by_itself_within_the_grace() {
        let (sock, mut peer) = silent_peer();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let grace = Duration::from_secs(2);
        peer.write_all(b"+OK\r\n").unwrap();
        let ((read, kernel), armed) = bounded(move || {
            unarmed(grace, || {
                let mut buf = [0; 16];
                let read = (&sock).read(&mut buf).map(|n| buf[..n].to_vec());
                (read, sock.kernel_read_timeout().unwrap())
            })
        });
        assert_eq!(read.unwrap(), b"+OK\r\n");
        assert_eq!(kernel, Some(grace));
        assert!(!armed);
    }

    /// A reply that comes after the grace: the setting is armed, and the read goes on
    /// watched, and gets the reply (sent only once the arming ran).
    #[test]
    fn an_unarmed_read_arms_the_setting_after_the_grace_and_gets_a_later_reply() {
        let (sock, mut peer) = silent_peer();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (armed, arming) = mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            arming.recv().unwrap();
            peer.write_all(b"+LATE\r\n").unwrap();
            peer
        });
        let read = bounded(move || {
            let arm = Box::new(move || {
                armed.send(()).unwrap();
                None
            });
            super::wake::scoped_later(Duration::from_millis(20), arm, || {
                let mut buf = [0; 16];
                (&sock).read(&mut buf).map(|n| buf[..n].to_vec())
            })
        });
        assert_eq!(read.unwrap(), b"+LATE\r\n");
        writer.join().unwrap();
    }

    /// A read shorter than the grace, and one longer, end at their own timeout, as a
    /// timeout, with nothing read; only the longer one armed the setting. (The grace of the
    /// shorter one is long, so that no pause of this thread before its read can make it due.)
    #[test]
    fn an_unarmed_read_ends_at_its_own_timeout() {
        for (timeout, grace) in [(30, 5_000), (60, 20)] {
            let (sock, _peer) = silent_peer();
            sock.set_read_timeout(Some(Duration::from_millis(timeout)))
                .unwrap();
            let (failed, armed) = bounded(move || {
                unarmed(Duration::from_millis(grace), || {
                    (&sock).read(&mut [0; 16]).map_err(|e| e.kind())
                })
            });
            assert!(
                matches!(failed, Err(ErrorKind::WouldBlock | ErrorKind::TimedOut)),
                "{timeout} ms, grace {grace} ms: {failed:?}"
            );
            assert_eq!(armed, timeout > grace, "{timeout} ms, grace {grace} ms");
        }
    }

    #[test]
    fn a_zero_timeout_is_refused_as_the_kernels_setter_refuses_it() {
        let (sock, _peer) = silent_peer();
        for set in [Socket::set_read_timeout, Socket::set_write_timeout] {
            let e = set(&sock, Some(Duration::ZERO)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
        }
    }
}
