//! The native half of `redmutex.asyncio`: an acquisition that a thread of that module's pool
//! makes for a task on an event loop, and that the loop's thread can end at once.
//!
//! The task's thread never waits: the pool's thread runs the core's call, ended at once by a
//! [`Canceller`] (its pipe is the wait's wake-up descriptor, its flag the call's interrupt
//! check), and hands the lease back as a [`Grant`]. The loop's thread installs the grant in
//! the lock object, a local step with no network call. A grant that no task takes any more
//! (the task was cancelled as it came) is discarded on the pool: released.

use std::any::Any;
use std::io::{PipeWriter, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::sync::lock;

/// Ends one acquisition's wait for a task that no longer wants it (cancelled, timed out).
#[pyclass(module = "redmutex._redmutex", name = "Canceller", frozen)]
pub struct Canceller {
    cancelled: AtomicBool,
    /// The pipe's read end, shared with the waits it ends (not duplicated per call).
    woken: Arc<OwnedFd>,
    wake: PipeWriter,
}

#[pymethods]
impl Canceller {
    #[new]
    fn new() -> PyResult<Canceller> {
        let (woken, wake) = std::io::pipe()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot make a pipe: {e}")))?;
        Ok(Canceller {
            cancelled: AtomicBool::new(false),
            woken: Arc::new(woken.into()),
            wake,
        })
    }

    /// Ends the wait at once: the acquisition gives up, and keeps nothing it took meanwhile.
    /// Local and quick: safe on an event loop's thread.
    fn cancel(&self) {
        if !self.cancelled.swap(true, Ordering::SeqCst) {
            // Written once: the pipe cannot be full.
            let _ = (&self.wake).write(b"!");
        }
    }
}

impl Canceller {
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Runs `work` with this canceller's pipe as the wake-up descriptor of its waits, so
    /// that cancel() ends a wait at once rather than at its cap.
    pub(crate) fn waking<T>(&self, work: impl FnOnce() -> T) -> T {
        let mut work = Some(work);
        if let Ok(Some(done)) =
            redmutex::wake_on(Arc::clone(&self.woken), || work.take().map(|w| w()))
        {
            return done;
        }
        // The descriptor could not be used (none left): wait as before, at the waits' cap.
        match work.take() {
            Some(w) => w(),
            None => unreachable!("wake_on ran the work or gave it back"),
        }
    }
}

/// A lease taken by a pool's thread for a task, not installed yet: the lock object takes it
/// (`_install`) on the loop's thread, or `discard()` releases it.
#[pyclass(module = "redmutex._redmutex", name = "Grant", frozen)]
pub struct Grant {
    /// The guard (a `redmutex::Guard` of the lock object's kind), until taken.
    guard: Mutex<Option<Box<dyn Any + Send>>>,
    /// Releases a guard of that kind.
    discard: fn(Box<dyn Any + Send>),
}

impl Grant {
    pub(crate) fn new<G: crate::source::Guard>(guard: G) -> Grant {
        Grant {
            guard: Mutex::new(Some(Box::new(guard))),
            discard: |g| {
                if let Ok(g) = g.downcast::<G>() {
                    drop(g.unlock());
                }
            },
        }
    }

    /// The guard, if it is of kind `G` and was not taken yet.
    pub(crate) fn take<G: crate::source::Guard>(&self) -> Option<G> {
        let mut slot = lock(&self.guard);
        match slot.take()?.downcast::<G>() {
            Ok(g) => Some(*g),
            Err(other) => {
                *slot = Some(other);
                None
            }
        }
    }
}

#[pymethods]
impl Grant {
    /// Releases the lease unless a lock object took it: a network call, for a pool's thread.
    fn discard(&self, py: Python<'_>) {
        let guard = lock(&self.guard).take();
        if let Some(g) = guard {
            let discard = self.discard;
            py.detach(move || discard(g));
        }
    }
}
