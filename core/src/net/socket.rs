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

/// A connection's socket, TCP or Unix, with the read timeout it was last given.
pub(crate) struct Socket {
    stream: Stream,
    /// The read timeout set last, in ns ([`NO_TIMEOUT`]: none): a watched read bounds its
    /// wait by it, and asking the kernel (`getsockopt`) would cost a system call per read.
    read_timeout: AtomicU64,
}

/// [`Socket::read_timeout`] when reads have no timeout.
const NO_TIMEOUT: u64 = u64::MAX;

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Socket {
    fn new(stream: Stream) -> Socket {
        Socket {
            stream,
            read_timeout: AtomicU64::new(NO_TIMEOUT),
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

    pub(crate) fn set_read_timeout(&self, dur: Option<Duration>) -> io::Result<()> {
        match &self.stream {
            Stream::Tcp(s) => s.set_read_timeout(dur),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(dur),
        }?;
        // A timeout of 2^64 ns or more (585 years) is as good as none.
        let ns = dur.map_or(NO_TIMEOUT, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(NO_TIMEOUT)
        });
        self.read_timeout.store(ns, Ordering::Relaxed);
        Ok(())
    }

    /// The read timeout set last (the kernel's, without asking it).
    fn read_timeout(&self) -> Option<Duration> {
        match self.read_timeout.load(Ordering::Relaxed) {
            NO_TIMEOUT => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    pub(crate) fn set_write_timeout(&self, dur: Option<Duration>) -> io::Result<()> {
        match &self.stream {
            Stream::Tcp(s) => s.set_write_timeout(dur),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(dur),
        }
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
    /// socket or the thread's wake-up descriptor, within the read timeout.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsFd;
        wake::ready(self.as_fd(), false, || Ok(self.read_timeout()))?;
        match &self.stream {
            Stream::Tcp(s) => (&*s).read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.stream {
            Stream::Tcp(s) => (&*s).write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => (&*s).write(buf),
        }
    }

    /// One `writev` for several buffers (rustls writes its records this way), as the streams
    /// themselves do.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
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
