//! Whether sockets have something to read: `poll(2)` through rustix, on Linux and Android.
//! Elsewhere no socket is ever found readable, and the transport reads replies in turn.

use super::socket::Socket;
use std::time::Duration;

/// Whether sockets can be waited on here.
pub(super) const CAN_POLL: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// Waits up to `timeout` for any of `sockets` to become readable (or to end), and puts their
/// indices in `ready`; `false` when none did in time or the wait failed. Interrupted by a
/// signal, it returns `true` with none ready, to wait again for the time then left.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn readable(sockets: &[&Socket], timeout: Duration, ready: &mut Vec<usize>) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds: Vec<PollFd> = sockets
        .iter()
        .map(|s| PollFd::new(*s, PollFlags::IN))
        .collect();
    let Ok(timeout) = Timespec::try_from(timeout) else {
        return false;
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(0) => false,
        Ok(_) => {
            ready.extend((0..fds.len()).filter(|&k| !fds[k].revents().is_empty()));
            true
        }
        Err(rustix::io::Errno::INTR) => true,
        Err(_) => false,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn readable(_: &[&Socket], _: Duration, _: &mut Vec<usize>) -> bool {
    false
}

/// How a wait on a socket and a wake-up descriptor ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Either {
    /// The socket has something to read (or has ended), or the wait failed: read it.
    Socket,
    /// The wake-up descriptor is readable, and the socket is not.
    Woken,
    /// Neither, by the end of the timeout.
    TimedOut,
}

/// Waits up to `timeout` for `socket` or `wake` to become readable. Interrupted by a signal,
/// it says `Socket`: the read that follows waits on, and ends as it would have.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn socket_or(
    socket: &Socket,
    wake: &impl std::os::fd::AsFd,
    timeout: Duration,
) -> Either {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [
        PollFd::new(socket, PollFlags::IN),
        PollFd::new(wake, PollFlags::IN),
    ];
    let Ok(timeout) = Timespec::try_from(timeout) else {
        return Either::Socket;
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(0) => Either::TimedOut,
        Ok(_) if fds[0].revents().is_empty() => Either::Woken,
        _ => Either::Socket,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn socket_or(_: &Socket, _: &impl std::os::fd::AsFd, _: Duration) -> Either {
    Either::Socket
}

/// Whether `fd` has something to read (or has ended) right now, without waiting: for an
/// idle connection's socket that owes no reply, that is the server having closed it; for a
/// wake-up descriptor, that it was written to.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn readable_now(fd: &impl std::os::fd::AsFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn readable_now(_: &impl std::os::fd::AsFd) -> bool {
    false
}
