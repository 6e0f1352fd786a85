//! The socket under a connection of our own: TCP (`redis://`, `rediss://`) or a Unix socket
//! (`unix://`). Both are read and written the same way, and both can be waited on with
//! `poll(2)`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::wake;

/// A connection's socket, TCP or Unix.
pub(crate) enum Socket {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Socket {
    /// The server end of the connection, as text (`host:port`, or a Unix socket's path):
    /// two connections with the same one reach the same server process, unless it was
    /// restarted (which breaks every connection to the old one).
    pub(crate) fn peer(&self) -> Option<String> {
        match self {
            Socket::Tcp(s) => s.peer_addr().ok().map(|a| a.to_string()),
            #[cfg(unix)]
            Socket::Unix(s) => s
                .peer_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string())),
        }
    }

    pub(crate) fn set_read_timeout(&self, dur: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(dur),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_read_timeout(dur),
        }
    }

    fn read_timeout(&self) -> io::Result<Option<Duration>> {
        match self {
            Socket::Tcp(s) => s.read_timeout(),
            #[cfg(unix)]
            Socket::Unix(s) => s.read_timeout(),
        }
    }

    pub(crate) fn set_write_timeout(&self, dur: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(dur),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_write_timeout(dur),
        }
    }

    pub(crate) fn shutdown(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.shutdown(Shutdown::Both),
            #[cfg(unix)]
            Socket::Unix(s) => s.shutdown(Shutdown::Both),
        }
    }
}

impl Read for &Socket {
    /// On a thread that watches every wait (see `wake.rs`), the read first waits for the
    /// socket or the thread's wake-up descriptor, within the read timeout.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::fd::AsFd;
        wake::ready(self.as_fd(), false, || self.read_timeout())?;
        match self {
            Socket::Tcp(s) => (&*s).read(buf),
            #[cfg(unix)]
            Socket::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).write(buf),
            #[cfg(unix)]
            Socket::Unix(s) => (&*s).write(buf),
        }
    }

    /// One `writev` for several buffers (rustls writes its records this way), as the streams
    /// themselves do.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).write_vectored(bufs),
            #[cfg(unix)]
            Socket::Unix(s) => (&*s).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(unix)]
impl std::os::fd::AsFd for Socket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Socket::Tcp(s) => s.as_fd(),
            Socket::Unix(s) => s.as_fd(),
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
