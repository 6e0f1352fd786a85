//! A file descriptor whose readability ends the calling thread's wait for a release at once
//! (see [`crate::wake_on`]): typically the read end of the self-pipe a signal handler writes
//! to, so that a signal ends a wait without waiting for its cap. A thread-local setting, so
//! that every kind of lock honours it with no argument added to each call. The thread keeps
//! its own duplicate of the descriptor while the setting lasts.

use std::cell::RefCell;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::rc::Rc;

thread_local! {
    static FD: RefCell<Option<Rc<OwnedFd>>> = const { RefCell::new(None) };
}

/// Runs `f` with `fd` as this thread's wake-up descriptor, then restores the one before.
/// Fails when the descriptor cannot be duplicated (not open, or too many open).
pub(crate) fn scoped<R>(fd: BorrowedFd<'_>, f: impl FnOnce() -> R) -> io::Result<R> {
    struct Restore(Option<Rc<OwnedFd>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FD.set(self.0.take());
        }
    }
    let ours = Rc::new(fd.try_clone_to_owned()?);
    let _restore = Restore(FD.replace(Some(ours)));
    Ok(f())
}

/// This thread's wake-up descriptor, if one is set.
pub(super) fn fd() -> Option<Rc<OwnedFd>> {
    FD.with_borrow(Clone::clone)
}

/// Whether this thread has a wake-up descriptor.
pub(crate) fn is_set() -> bool {
    FD.with_borrow(Option::is_some)
}

/// Whether this thread's wake-up descriptor is readable now (`false` when it has none).
pub(crate) fn readable_now() -> bool {
    fd().is_some_and(|fd| super::poll::readable_now(&*fd))
}
