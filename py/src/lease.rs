//! `Holds`: the acquisitions of one lock object (a Lock, a Semaphore, a read or write side of
//! an RwLock), each with the thread that made it, and what every kind does with them:
//! acquiring with Ctrl-C honoured, releasing, `on_lost` calls, `wait_lost`, `extend`.
//!
//! The acquisitions sit in a slot that is locked only for moments, never across a network
//! call or a call into Python: network calls work on a clone of a guard's `Arc`, with the GIL
//! released. So no thread ever waits for the slot while holding the GIL, and a forked child
//! never inherits the slot locked by a parent's network call.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use pyo3::PyTraverseError;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use redmutex::{ErrorKind, TryLockError};

use crate::aio::{Canceller, Grant};
use crate::args::{self, Wait};
use crate::callbacks;
use crate::errors::{self, not_held};
use crate::gate::Gate;
use crate::interrupt::{self, SIGNAL_CHECK};
use crate::source::{Guard, Source};
use crate::sync::lock;

/// The messages of a kind's `NotHeldError`s.
pub(crate) struct Words {
    /// When the object holds nothing to act on ("this Lock is not acquired").
    pub(crate) not_acquired: &'static str,
    /// When release() finds nothing to release.
    pub(crate) release_unheld: &'static str,
}

/// One acquisition, and the thread that made it.
struct Held<G> {
    thread: ThreadId,
    guard: Arc<G>,
    /// Set when the lease is lost or released; wakes `wait_lost`.
    ended: Arc<Flag>,
    /// Closed on release: this acquisition's `on_lost` call never runs after that.
    gate: Arc<Gate>,
}

impl<G> Held<G> {
    /// Ends the acquisition's callbacks; call without the GIL.
    fn close(&self) {
        self.ended.set();
        self.gate.close();
    }
}

/// The acquisition the calling thread acts on: its own most recent one, or, for a thread that
/// made none (a watchdog, a timer), the most recent one of any thread.
fn pick<G>(held: &[Held<G>]) -> Option<usize> {
    let me = thread::current().id();
    held.iter()
        .rposition(|h| h.thread == me)
        .or_else(|| held.len().checked_sub(1))
}

/// An acquisition's end (released or lost), that `wait_lost` waits for.
#[derive(Default)]
struct Flag {
    state: Mutex<FlagState>,
    cv: Condvar,
}

#[derive(Default)]
struct FlagState {
    set: bool,
    /// Threads in `wait`: a notification is a system call even with no one to wake, and
    /// every release sets the flag.
    waiting: usize,
}

impl Flag {
    fn set(&self) {
        let mut st = lock(&self.state);
        st.set = true;
        if st.waiting > 0 {
            self.cv.notify_all();
        }
    }

    fn wait(&self, timeout: Duration) {
        let mut st = lock(&self.state);
        if !st.set {
            st.waiting += 1;
            let (mut st, _) = self
                .cv
                .wait_timeout(st, timeout)
                .unwrap_or_else(PoisonError::into_inner);
            st.waiting -= 1;
        }
    }
}

/// The acquisitions of one lock object.
pub(crate) struct Holds<S: Source> {
    source: S,
    /// Whether one thread may hold several acquisitions at once (permits, read holds).
    /// Otherwise a thread's new acquisition replaces its earlier one, which can only be lost
    /// (the lock is not re-entrant).
    stacked: bool,
    words: Words,
    slot: Mutex<Vec<Held<S::Guard>>>,
    /// The user's `on_lost` callable; shared so that `clear` can break cycles through it.
    on_lost: Arc<Mutex<Option<Py<PyAny>>>>,
}

impl<S: Source> Holds<S> {
    pub(crate) fn new(
        source: S,
        stacked: bool,
        words: Words,
        on_lost: Option<Py<PyAny>>,
    ) -> Holds<S> {
        Holds {
            source,
            stacked,
            words,
            slot: Mutex::new(Vec::new()),
            on_lost: Arc::new(Mutex::new(on_lost)),
        }
    }

    pub(crate) fn source(&self) -> &S {
        &self.source
    }

    fn current(&self) -> Option<Arc<S::Guard>> {
        let held = lock(&self.slot);
        pick(&held).map(|i| Arc::clone(&held[i].guard))
    }

    /// The current guard, or `NotHeldError`.
    fn guard(&self, py: Python<'_>) -> PyResult<Arc<S::Guard>> {
        self.current()
            .ok_or_else(|| not_held(py, self.words.not_acquired))
    }

    /// How many acquisitions this object holds (lost ones too, until released).
    pub(crate) fn count(&self) -> usize {
        lock(&self.slot).len()
    }

    /// `acquire(blocking, timeout)` with `threading.Lock`'s conventions.
    pub(crate) fn acquire(
        &self,
        py: Python<'_>,
        blocking: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.take(py, args::wait(blocking, timeout)?)
    }

    pub(crate) fn take(&self, py: Python<'_>, wait: Wait) -> PyResult<bool> {
        let source = self.source.clone();
        let result = interrupt::call(py, move |cancel| {
            let result = match wait {
                Wait::Once => source.try_once(),
                Wait::Until(deadline) => match cancel {
                    Some(cancel) => source.wait(deadline, &mut || cancel.load(Ordering::SeqCst)),
                    None => source.wait_uninterrupted(deadline),
                },
            };
            // The caller was interrupted and is gone: keep nothing it took meanwhile.
            if cancel.is_some_and(|c| c.load(Ordering::SeqCst))
                && let Ok(guard) = result
            {
                drop(guard.unlock());
                return None;
            }
            Some(result)
        })?;
        match result {
            Some(Ok(guard)) => {
                // A signal that arrived during the last attempt is raised now, and the lease
                // is not kept: an interrupted acquire leaves nothing held.
                if let Err(e) = py.check_signals() {
                    py.detach(|| drop(guard.unlock()));
                    return Err(e);
                }
                self.install(py, guard);
                Ok(true)
            }
            Some(Err(TryLockError::WouldBlock)) => Ok(false),
            Some(Err(e)) if e.kind() != ErrorKind::Interrupted => Err(errors::to_py(py, e.into())),
            _ => Err(PyKeyboardInterrupt::new_err("the wait was interrupted")),
        }
    }

    /// `acquire(blocking, timeout)` for a task of `redmutex.asyncio`, on a thread of its pool
    /// (see `aio.rs`): the lease as a [`Grant`] for the loop's thread to install, or `None`
    /// when the wait ran out or `canceller` ended it (then nothing is kept).
    pub(crate) fn take_for_task(
        &self,
        py: Python<'_>,
        blocking: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        canceller: &Canceller,
    ) -> PyResult<Option<Grant>> {
        let wait = args::wait(blocking, timeout)?;
        let source = self.source.clone();
        let result = py.detach(move || {
            canceller.waking(|| match wait {
                Wait::Once => source.try_once(),
                Wait::Until(deadline) => source.wait(deadline, &mut || canceller.is_cancelled()),
            })
        });
        match result {
            Ok(guard) if canceller.is_cancelled() => {
                py.detach(|| drop(guard.unlock()));
                Ok(None)
            }
            Ok(guard) => Ok(Some(Grant::new(guard))),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted && canceller.is_cancelled() => Ok(None),
            Err(e) => Err(errors::to_py(py, e.into())),
        }
    }

    /// Installs a lease that [`take_for_task`](Self::take_for_task) took: local, for the
    /// loop's thread, whose acquisition it becomes (every task of the loop acts on it).
    pub(crate) fn install_grant(&self, grant: &Grant) -> PyResult<()> {
        let guard = grant.take::<S::Guard>().ok_or_else(|| {
            PyRuntimeError::new_err("this grant was installed or discarded already")
        })?;
        if let Some(old) = self.install_replacing(guard) {
            // Off the loop's thread: dropping a lost acquisition is a (refused) release.
            thread::spawn(move || {
                old.close();
                drop(old);
            });
        }
        Ok(())
    }

    fn install(&self, py: Python<'_>, guard: S::Guard) {
        if let Some(old) = self.install_replacing(guard) {
            // This thread's lost acquisition that it never released; dropping it is a
            // (refused) release.
            py.detach(|| {
                old.close();
                drop(old);
            });
        }
    }

    /// Makes `guard` the calling thread's acquisition; returns the one it replaces (see
    /// `stacked`), for the caller to drop: a network call.
    fn install_replacing(&self, guard: S::Guard) -> Option<Held<S::Guard>> {
        let ended = Arc::new(Flag::default());
        let gate = Arc::new(Gate::new());
        let guard = Arc::new(guard);
        let (flag, call_gate) = (Arc::clone(&ended), Arc::clone(&gate));
        let callable = Arc::clone(&self.on_lost);
        // Runs on the core's renew thread, without the GIL.
        guard.on_lost(Box::new(move || {
            flag.set();
            callbacks::call_soon(callable, call_gate);
        }));
        let me = thread::current().id();
        let mut held = lock(&self.slot);
        let previous = if self.stacked {
            None
        } else {
            held.iter()
                .position(|h| h.thread == me)
                .map(|i| held.remove(i))
        };
        held.push(Held {
            thread: me,
            guard,
            ended,
            gate,
        });
        previous
    }

    /// Releases the current acquisition.
    pub(crate) fn release(&self, py: Python<'_>) -> PyResult<()> {
        let held = {
            let mut held = lock(&self.slot);
            pick(&held).map(|i| held.remove(i))
        }
        .ok_or_else(|| not_held(py, self.words.release_unheld))?;
        // Interrupted, the release goes on in the background (or the lease runs out).
        let result = interrupt::call(py, move |_| {
            held.close();
            // The last owner unlocks: the release and the guard's drop then read the process
            // id once (a system call), where a release and a drop after it read it three
            // times. A guard another thread still uses (a `check` under way) is released in
            // place.
            match Arc::try_unwrap(held.guard) {
                Ok(guard) => guard.unlock(),
                Err(guard) => guard.release(),
            }
        })?;
        result.map_err(|e| errors::to_py(py, e))
    }

    /// Whether the current acquisition is held now, answered locally.
    pub(crate) fn owned(&self) -> bool {
        self.current().is_some_and(|g| g.is_held())
    }

    pub(crate) fn check(&self, py: Python<'_>) -> PyResult<()> {
        self.guard(py)?.check().map_err(|e| errors::to_py(py, e))
    }

    pub(crate) fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        let ttl = args::duration("ttl", ttl, redmutex::MIN_TTL, redmutex::MAX_TTL)?;
        let guard = self.guard(py)?;
        interrupt::call(py, move |_| guard.extend(ttl))?.map_err(|e| errors::to_py(py, e))
    }

    pub(crate) fn wait_lost(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let deadline = args::deadline("timeout", timeout)?;
        let ended = {
            let held = lock(&self.slot);
            match pick(&held) {
                Some(i) => Arc::clone(&held[i].ended),
                None => return Ok(false),
            }
        };
        loop {
            let guard = {
                let held = lock(&self.slot);
                match held.iter().find(|h| Arc::ptr_eq(&h.ended, &ended)) {
                    Some(h) => Arc::clone(&h.guard),
                    // Released (and maybe acquired again): this acquisition was not lost.
                    None => return Ok(false),
                }
            };
            if !guard.is_held() {
                return Ok(true);
            }
            drop(guard);
            let now = Instant::now();
            let slice = match deadline {
                Some(d) if d <= now => return Ok(false),
                Some(d) => (d - now).min(SIGNAL_CHECK),
                None => SIGNAL_CHECK,
            };
            py.detach(|| ended.wait(slice));
            py.check_signals()?;
        }
    }

    /// The current acquisition's fence; a lost one gets none.
    pub(crate) fn fence(&self, py: Python<'_>) -> PyResult<u64> {
        let guard = self.guard(py)?;
        guard.check().map_err(|e| errors::to_py(py, e))?;
        Ok(guard.fence())
    }

    pub(crate) fn valid_for(&self) -> f64 {
        match self.current() {
            Some(g) if g.is_held() => g
                .valid_until()
                .saturating_duration_since(Instant::now())
                .as_secs_f64(),
            _ => 0.0,
        }
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never block in a traversal; a callable being handed out right now is seen next time.
        if let Ok(callable) = self.on_lost.try_lock() {
            visit.call(callable.as_ref())?;
        }
        Ok(())
    }

    pub(crate) fn clear(&self) {
        let callable = lock(&self.on_lost).take();
        drop(callable);
    }
}

impl<S: Source> Drop for Holds<S> {
    fn drop(&mut self) {
        let held = std::mem::take(self.slot.get_mut().unwrap_or_else(PoisonError::into_inner));
        if held.is_empty() {
            return;
        }
        // Dropping the guards releases the leases (best effort, bounded by the connect
        // timeout); let other threads run meanwhile, and the callback thread finish a call.
        let mut held = Some(held);
        Python::try_attach(|py| {
            py.detach(|| {
                for h in held.take().unwrap_or_default() {
                    h.close();
                }
            })
        });
        if let Some(held) = held {
            // The interpreter is shutting down: a callback waiting for the GIL would never
            // finish, so stop the calls without waiting for one.
            for h in held {
                h.ended.set();
                h.gate.disarm();
            }
        }
    }
}
