//! Ending a wait for a release the moment a signal arrives: [`wake_on`].

use std::os::fd::BorrowedFd;

use crate::error::{Error, ErrorKind};

/// Runs `f` on this thread so that every wait for a release it makes (a waiting `lock`,
/// `acquire`, `read` or `write` of any lock, and their `_interruptible` forms) ends as soon
/// as `fd` becomes readable, instead of at its wait cap: typically the read end of a
/// self-pipe that a signal handler writes to (Python's `signal.set_wakeup_fd`, a C program's
/// own handler).
///
/// A wait so ended ends like one whose time ran out (from a second connection, keeping its
/// own), and the call's interrupt check (the `interrupted` of `lock_interruptible`) runs at
/// once: it says whether the call ends with [`ErrorKind::Interrupted`] or goes on. So `fd`
/// should be readable only while that check says to stop (drain the pipe when you decide to
/// go on), or every wait ends at once. A round already sent finishes first (within the node
/// timeout; on a healthy server, a round trip).
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`] when `fd` cannot be used (the thread keeps a duplicate of it
/// while `f` runs, and duplicating it failed); `f` did not run.
pub fn wake_on<R>(fd: BorrowedFd<'_>, f: impl FnOnce() -> R) -> Result<R, Error> {
    crate::net::wake_on(fd, f).map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("the wake-up descriptor cannot be used: {e}"),
        )
    })
}
