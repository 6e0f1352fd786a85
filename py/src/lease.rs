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
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use redmutex::{Error, ErrorKind, TryLockError};

use crate::args::{self, Wait};
use crate::callbacks;
use crate::errors::{self, not_held};
use crate::gate::Gate;
use crate::interrupt::{self, SIGNAL_CHECK};
use crate::sync::lock;

/// A held lease of the core: a `redmutex::Guard` of any kind.
pub(crate) trait Guard: Send + Sync + 'static {
    fn fence(&self) -> u64;
    fn is_held(&self) -> bool;
    fn check(&self) -> Result<(), Error>;
    fn valid_until(&self) -> Instant;
    fn extend(&self, ttl: Duration) -> Result<(), Error>;
    fn on_lost(&self, callback: Box<dyn FnOnce() + Send + 'static>);
    fn release(&self) -> Result<(), Error>;
    fn unlock(self) -> Result<(), Error>;
}

impl<K: redmutex::kind::Kind> Guard for redmutex::Guard<K> {
    fn fence(&self) -> u64 {
        redmutex::Guard::fence(self)
    }
    fn is_held(&self) -> bool {
        redmutex::Guard::is_held(self)
    }
    fn check(&self) -> Result<(), Error> {
        redmutex::Guard::check(self)
    }
    fn valid_until(&self) -> Instant {
        redmutex::Guard::valid_until(self)
    }
    fn extend(&self, ttl: Duration) -> Result<(), Error> {
        redmutex::Guard::extend(self, ttl)
    }
    fn on_lost(&self, callback: Box<dyn FnOnce() + Send + 'static>) {
        redmutex::Guard::on_lost(self, callback)
    }
    fn release(&self) -> Result<(), Error> {
        redmutex::Guard::release(self).map(drop)
    }
    fn unlock(self) -> Result<(), Error> {
        redmutex::Guard::unlock(self).map(drop)
    }
}

/// What hands out one kind of guard: a mutex, a semaphore, one side of a read-write lock.
pub(crate) trait Source: Clone + Send + 'static {
    type Guard: Guard;
    /// One attempt.
    fn try_once(&self) -> Result<Self::Guard, TryLockError>;
    /// Waits until `deadline` (or forever), giving up when `cancel` returns true.
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError>;
    /// Waits until `deadline` (or forever), with nothing to interrupt it (so its waits grow
    /// while nothing is released, see `MutexOptions::wait_cap`).
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError>;
}

impl Source for redmutex::Mutex {
    type Guard = redmutex::MutexGuard;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.try_lock()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.lock_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.try_lock_until(d),
            None => self.lock().map_err(Into::into),
        }
    }
}

impl Source for redmutex::Semaphore {
    type Guard = redmutex::Permit;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.try_acquire()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.acquire_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.try_acquire_until(d),
            None => self.acquire().map_err(Into::into),
        }
    }
}

/// The read side of a read-write lock.
#[derive(Clone)]
pub(crate) struct Reads(pub(crate) redmutex::RwLock);

/// The write side of a read-write lock.
#[derive(Clone)]
pub(crate) struct Writes(pub(crate) redmutex::RwLock);

impl Source for Reads {
    type Guard = redmutex::ReadGuard;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.0.try_read()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.0.read_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.0.try_read_until(d),
            None => self.0.read().map_err(Into::into),
        }
    }
}

impl Source for Writes {
    type Guard = redmutex::WriteGuard;
    fn try_once(&self) -> Result<Self::Guard, TryLockError> {
        self.0.try_write()
    }
    fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Self::Guard, TryLockError> {
        self.0.write_interruptible(deadline, cancel)
    }
    fn wait_uninterrupted(&self, deadline: Option<Instant>) -> Result<Self::Guard, TryLockError> {
        match deadline {
            Some(d) => self.0.try_write_until(d),
            None => self.0.write().map_err(Into::into),
        }
    }
}

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

#[derive(Default)]
struct Flag {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Flag {
    fn set(&self) {
        *lock(&self.set) = true;
        self.cv.notify_all();
    }

    fn wait(&self, timeout: Duration) {
        let set = lock(&self.set);
        if !*set {
            drop(self.cv.wait_timeout(set, timeout));
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
        // Any truthy value, as threading.Lock.acquire takes it.
        let blocking = match blocking {
            Some(b) => b.is_truthy()?,
            None => true,
        };
        let wait = args::wait(blocking, timeout)?;
        self.take(py, wait)
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

    fn install(&self, py: Python<'_>, guard: S::Guard) {
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
        let previous = {
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
        };
        if let Some(old) = previous {
            // This thread's lost acquisition that it never released; dropping it is a
            // (refused) release.
            py.detach(|| {
                old.close();
                drop(old);
            });
        }
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
            held.guard.release()
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
