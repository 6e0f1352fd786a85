//! State that belongs to one process: a forked child gets its own.
//!
//! `fork` copies memory, locks included, but only the forking thread: a lock that another
//! thread held at that instant stays locked in the child forever. A child must therefore never
//! take a lock that its parent's threads use (a connection pool, the renew queue), not even to
//! find out that the state behind it is the parent's. [`PerProcess`] reaches the child's own
//! value through atomics and a chain of `OnceLock`s, one link per generation of forks.

use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    /// This process's id while the thread is inside a [`Scope`]; 0 outside one.
    static SCOPED: Cell<u32> = const { Cell::new(0) };
}

/// This process's id. `getpid` is a system call (about half a microsecond here), and one lock
/// and unlock asked for it about ten times (the pools, the renew queue, the owner label, the
/// guard's owner check): inside a [`Scope`] it is read once.
pub(crate) fn id() -> u32 {
    match SCOPED.with(Cell::get) {
        0 => std::process::id(),
        pid => pid,
    }
}

/// While it lives, [`id`] on this thread answers the id read when it was entered: one call of
/// the library (an acquisition, a release), which forks nothing and runs no user code.
///
/// It cannot outlive a fork: only the forking thread goes on in the child, and a thread that
/// calls `fork` is not inside a library call, so no child thread starts inside a scope.
pub(crate) struct Scope {
    entered: bool,
}

impl Scope {
    pub(crate) fn enter() -> Scope {
        SCOPED.with(|pid| {
            let entered = pid.get() == 0;
            if entered {
                pid.set(std::process::id());
            }
            Scope { entered }
        })
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.entered {
            SCOPED.with(|pid| pid.set(0));
        }
    }
}

/// A value for the process that made it, and one for each forked child, made there on first
/// use.
pub(crate) struct PerProcess<T> {
    pid: u32,
    value: T,
    /// The value of a child of this process (set in the child's copy of this memory only).
    child: OnceLock<Box<PerProcess<T>>>,
}

impl<T> PerProcess<T> {
    pub(crate) fn new(value: T) -> PerProcess<T> {
        PerProcess {
            pid: id(),
            value,
            child: OnceLock::new(),
        }
    }

    /// This process's value; in a forked child, `make` makes it on first use from the parent's
    /// value (which it may only inspect without blocking: its locks may never be released).
    pub(crate) fn get(&self, make: impl Fn(&T) -> T) -> &T {
        let pid = id();
        let mut at = self;
        while at.pid != pid {
            let parent = &at.value;
            at = at
                .child
                .get_or_init(|| Box::new(PerProcess::new(make(parent))));
        }
        &at.value
    }

    /// This process's value, if it has one yet.
    pub(crate) fn existing(&self) -> Option<&T> {
        let pid = id();
        let mut at = self;
        while at.pid != pid {
            at = at.child.get()?;
        }
        Some(&at.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_holds_the_pid_until_its_outermost_entry_ends() {
        let scoped = || SCOPED.with(Cell::get);
        assert_eq!((scoped(), id()), (0, std::process::id()));
        {
            let _outer = Scope::enter();
            assert_eq!(scoped(), std::process::id());
            drop(Scope::enter());
            assert_eq!(
                scoped(),
                std::process::id(),
                "an inner scope ended the outer one"
            );
        }
        assert_eq!(scoped(), 0, "the pid outlived its scope");
    }

    #[test]
    fn the_making_process_gets_its_own_value() {
        let v = PerProcess::new(7);
        assert_eq!(*v.get(|_| unreachable!("not a child")), 7);
        assert_eq!(v.existing(), Some(&7));
    }
}
