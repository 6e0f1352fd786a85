//! Ending a call's waits the moment a signal arrives: [`wake_on`] (waits for a release),
//! [`wake_on_checked`] (every wait: reads and connects too) and [`wake_on_checked_after`]
//! (the same, set up only once a call lasts).

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind};

/// A descriptor that [`wake_on`] and [`wake_on_checked`] can watch. The thread keeps it open
/// while their `f` runs:
/// - a [`BorrowedFd`] is duplicated for that time (two system calls per scope: `dup`, and
///   `close` at its end);
/// - an `Arc<OwnedFd>` is shared as it is: the choice for a descriptor that many calls
///   watch, one after another (a binding's own signal pipe).
pub trait WakeSource: sealed::Sealed {
    /// The descriptor, kept open for the scope.
    #[doc(hidden)]
    fn keep(self) -> io::Result<Arc<OwnedFd>>;
}

impl WakeSource for BorrowedFd<'_> {
    fn keep(self) -> io::Result<Arc<OwnedFd>> {
        self.try_clone_to_owned().map(Arc::new)
    }
}

impl WakeSource for Arc<OwnedFd> {
    fn keep(self) -> io::Result<Arc<OwnedFd>> {
        Ok(self)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::os::fd::BorrowedFd<'_> {}
    impl Sealed for std::sync::Arc<std::os::fd::OwnedFd> {}
}

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
/// [`ErrorKind::InvalidArgument`] when `fd` cannot be used (a [`BorrowedFd`] is kept as a
/// duplicate while `f` runs, and duplicating it failed); `f` did not run.
pub fn wake_on<R>(fd: impl WakeSource, f: impl FnOnce() -> R) -> Result<R, Error> {
    let fd = fd.keep().map_err(unusable)?;
    Ok(crate::net::wake_on(fd, None, f))
}

/// Runs `f` on this thread so that **every** network wait it makes ends as soon as `fd`
/// becomes readable and `go_on` says to stop: the waits for a release as with [`wake_on`],
/// and also each read of a reply, each connect on this thread and on the threads it starts
/// to connect for a round. So a call ends within about a millisecond of a signal even while
/// a server does not answer (frozen, or a host that is gone), not at its node or connect
/// timeout.
///
/// `go_on` is called on this thread whenever `fd` is readable during such a wait. It must
/// first drain `fd` (read what it holds), then say whether the call goes on (`true`: the
/// wait goes on as if nothing happened) or stops (`false`). Python's binding, for one, drains
/// its signal self-pipe and runs the signal handlers there, and stops when one raised.
/// A wait inside `go_on` (a handler that calls the library) is not ended by `fd`.
///
/// Once `go_on` said stop, every later wait of `f` ends at once as if its time had run out:
/// the round in flight is treated as one whose nodes did not answer by its deadline (what it
/// may have stored is undone behind its requests, or by a clean-up in the background), and
/// the call's clean-up (withdrawing a waiter's announcement, releasing a lock taken as the
/// wait ended) goes to the background rather than waiting on its servers. The call ends
/// with [`ErrorKind::Interrupted`] when its interrupt check (the `interrupted` of
/// `lock_interruptible`) says so, which it should once `go_on` said stop; a call with no
/// interrupt check ends with the error its interrupted round gave (a timeout).
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`] when `fd` cannot be used (a [`BorrowedFd`] is kept as a
/// duplicate while `f` runs, and duplicating it failed); `f` did not run.
pub fn wake_on_checked<R>(
    fd: impl WakeSource,
    go_on: impl FnMut() -> bool + 'static,
    f: impl FnOnce() -> R,
) -> Result<R, Error> {
    let fd = fd.keep().map_err(unusable)?;
    Ok(crate::net::wake_on(fd, Some(Box::new(go_on)), f))
}

/// [`wake_on_checked`] for a descriptor that costs something to set up for each call, and
/// calls that mostly end within a round trip: `arm` sets the descriptor up (Python's binding:
/// `signal.set_wakeup_fd`) only when `f` has run for `grace` and still waits, or sooner
/// when it is about to wait for anything but a reply (a release, a pause between attempts,
/// the threads that connect for a round). Until then `f`'s reads and connects wait on their
/// sockets alone, `grace` at most, and a call that ends sooner never runs `arm`: it costs
/// what an unwatched call does.
///
/// `arm` gives the descriptor and the check (as [`wake_on_checked`] takes them), or `None`
/// when there is nothing to watch after all: `f` then runs on unwatched. Once armed, the
/// check runs once at once, whether or not the descriptor is readable: what happened before
/// the descriptor was there (a signal whose handler must run) is asked about then. So a
/// signal ends a call within about `grace`, or at once when it interrupts the wait (EINTR).
///
/// The C binding does not need it: a C program's descriptor is set up once, by the program,
/// and each call watches it as it is ([`wake_on_checked`]).
pub fn wake_on_checked_after<R, G>(
    grace: Duration,
    arm: impl FnOnce() -> Option<(Arc<OwnedFd>, G)> + 'static,
    f: impl FnOnce() -> R,
) -> R
where
    G: FnMut() -> bool + 'static,
{
    let arm = Box::new(move || arm().map(|(fd, go_on)| (fd, Box::new(go_on) as _)));
    crate::net::wake_on_later(grace, arm, f)
}

fn unusable(e: io::Error) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("the wake-up descriptor cannot be used: {e}"),
    )
}
