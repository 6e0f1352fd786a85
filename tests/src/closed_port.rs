//! A loopback port that refuses connections, and stays so for as long as it is held.

use std::os::fd::{FromRawFd, OwnedFd};

/// A loopback TCP port bound by this process and never listened on: a connection to it is
/// refused, and no other process (another test's `redis-server`) can take it while this is
/// held. A port from [`free_port`](crate::free_port) with nothing bound on it is refused only
/// until someone else binds it.
pub struct ClosedPort {
    _socket: OwnedFd,
    port: u16,
}

impl ClosedPort {
    /// Binds a fresh loopback port without listening on it.
    pub fn new() -> ClosedPort {
        // SAFETY: plain socket calls on a descriptor this function owns; `addr` and `len`
        // are valid for the calls that write them.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let socket = OwnedFd::from_raw_fd(fd);
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let at = &raw mut addr as *mut libc::sockaddr;
            assert!(
                libc::bind(fd, at, len) == 0 && libc::getsockname(fd, at, &mut len) == 0,
                "cannot bind a loopback port: {}",
                std::io::Error::last_os_error()
            );
            ClosedPort {
                _socket: socket,
                port: u16::from_be(addr.sin_port),
            }
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Default for ClosedPort {
    fn default() -> ClosedPort {
        ClosedPort::new()
    }
}

#[cfg(test)]
mod tests {
    use super::ClosedPort;

    #[test]
    fn a_closed_port_refuses_connections_while_held() {
        let closed = ClosedPort::new();
        let err = std::net::TcpStream::connect(("127.0.0.1", closed.port())).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        // Held, the port cannot be taken by anyone else.
        assert!(std::net::TcpListener::bind(("127.0.0.1", closed.port())).is_err());
    }
}
