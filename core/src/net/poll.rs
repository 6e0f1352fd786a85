//! Whether sockets have something to read: `poll(2)` through rustix, on Linux and Android.
//! Elsewhere no socket is ever found readable, and the transport reads replies in turn.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// Whether sockets can be waited on here.
pub(super) const CAN_POLL: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// Waits up to `timeout` for any of `sockets` to become readable (or to end), or `wake`, and
/// puts the sockets' indices in `ready`; `false` when none did in time or the wait failed.
/// Interrupted by a signal, or woken, it returns `true` with none ready, to look again.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn readable(
    sockets: &[BorrowedFd<'_>],
    wake: Option<BorrowedFd<'_>>,
    timeout: Duration,
    ready: &mut Vec<usize>,
) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds: Vec<PollFd> = sockets
        .iter()
        .map(|s| PollFd::new(s, PollFlags::IN))
        .collect();
    if let Some(wake) = &wake {
        fds.push(PollFd::new(wake, PollFlags::IN));
    }
    let Ok(timeout) = Timespec::try_from(timeout) else {
        return false;
    };
    match poll(&mut fds, Some(&timeout)) {
        Ok(0) => false,
        Ok(_) => {
            ready.extend((0..sockets.len()).filter(|&k| !fds[k].revents().is_empty()));
            true
        }
        Err(rustix::io::Errno::INTR) => true,
        Err(_) => false,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn readable(
    _: &[BorrowedFd<'_>],
    _: Option<BorrowedFd<'_>>,
    _: Duration,
    _: &mut Vec<usize>,
) -> bool {
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
pub(super) fn socket_or(socket: &impl AsFd, wake: &impl AsFd, timeout: Duration) -> Either {
    fd_or(socket.as_fd(), false, wake, Some(timeout))
}

/// Waits up to `timeout` (`None`: for as long as it takes) for `fd` to become readable (with
/// `write`, writable: a connect's end) or `wake` readable. Interrupted by a signal, it says
/// `Woken`: the caller looks at `wake` (a signal's handler may have written to it) and waits
/// again. When the wait fails, it says `Socket`: what follows finds out.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn fd_or(
    fd: BorrowedFd<'_>,
    write: bool,
    wake: &impl AsFd,
    timeout: Option<Duration>,
) -> Either {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let flags = if write { PollFlags::OUT } else { PollFlags::IN };
    let mut fds = [PollFd::new(&fd, flags), PollFd::new(wake, PollFlags::IN)];
    let timeout = match timeout.map(Timespec::try_from) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(_)) => return Either::Socket,
    };
    match poll(&mut fds, timeout.as_ref()) {
        Ok(0) => Either::TimedOut,
        Ok(_) if fds[0].revents().is_empty() => Either::Woken,
        Err(rustix::io::Errno::INTR) => Either::Woken,
        _ => Either::Socket,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn fd_or(_: BorrowedFd<'_>, _: bool, _: &impl AsFd, _: Option<Duration>) -> Either {
    Either::Socket
}

/// Waits up to `timeout` for `fd` to become readable (with `write`, writable); `true` when it
/// did, or when the wait failed (what follows finds out); `false` when the time ran out or a
/// signal interrupted the wait.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn fd_ready(fd: BorrowedFd<'_>, write: bool, timeout: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let flags = if write { PollFlags::OUT } else { PollFlags::IN };
    let mut fds = [PollFd::new(&fd, flags)];
    let Ok(timeout) = Timespec::try_from(timeout) else {
        return true;
    };
    !matches!(
        poll(&mut fds, Some(&timeout)),
        Ok(0) | Err(rustix::io::Errno::INTR)
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn fd_ready(_: BorrowedFd<'_>, _: bool, timeout: Duration) -> bool {
    std::thread::sleep(timeout);
    true
}

/// Whether `fd` has something to read (or has ended) right now, without waiting: for an
/// idle connection's socket that owes no reply, that is the server having closed it; for a
/// wake-up descriptor, that it was written to.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn readable_now(fd: &impl AsFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn readable_now(_: &impl AsFd) -> bool {
    false
}
