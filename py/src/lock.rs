//! `Lock`: one lock name with its options, and the guards of its acquisitions, one per thread
//! that acquired it.
//!
//! The guards sit in a slot that is locked only for moments, never across a network call or a
//! call into Python: network calls work on a clone of a guard's `Arc`, with the GIL released.
//! So no thread ever waits for the slot while holding the GIL, and a forked child never
//! inherits the slot locked by a parent's network call.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{PyTraverseError, exceptions::PyKeyboardInterrupt};
use redmutex::{ErrorKind, MutexGuard, TryLockError};

use crate::args::{self, Wait};
use crate::callbacks;
use crate::errors::{self, not_held};
use crate::gate::Gate;
use crate::interrupt::{self, SIGNAL_CHECK};
use crate::status::LockStatus;
use crate::sync::lock;

/// One acquisition, and the thread that made it.
struct Held {
    thread: ThreadId,
    guard: Arc<MutexGuard>,
    /// Set when the lock is lost or released; wakes `wait_lost`.
    ended: Arc<Flag>,
    /// Closed on release: this acquisition's `on_lost` call never runs after that.
    gate: Arc<Gate>,
}

impl Held {
    /// Ends the acquisition's callbacks and releases it (best effort when dropped); call
    /// without the GIL.
    fn close(&self) {
        self.ended.set();
        self.gate.close();
    }
}

/// The acquisition the calling thread acts on: its own, or, for a thread that made none
/// (a watchdog, a timer), the most recent one.
fn pick(held: &[Held]) -> Option<usize> {
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

/// A distributed lock on one name, made by Client.lock().
///
/// Mirrors threading.Lock: acquire(blocking=True, timeout=None), release(), `with lock:`; not
/// re-entrant. Also locked() (anyone holds it: asks Redis), owned() (this Lock holds it:
/// local), extend(ttl), check(), wait_lost(timeout), and the fence and valid_for properties.
/// While held, the lease is renewed on a background thread. Thread-safe. An acquisition
/// belongs to the thread that made it (as redis-py's thread_local=True): release(),
/// extend(), check(), owned(), fence and wait_lost() act on the calling thread's own, so a
/// thread whose lock was lost gets LockLostError and never releases the acquisition another
/// thread made since. A thread that made none acts on the most recent one (a watchdog thread,
/// a release from a threading.Timer). A Lock inherited by a forked child neither renews nor
/// releases the parent's lock.
///
/// On the main thread, Ctrl-C interrupts every call that can wait for Redis within 100 ms
/// (KeyboardInterrupt): acquire() (also while it opens the first connection), release(), the
/// end of a `with` block, extend(), locked(), status() and wait_lost(). An interrupted
/// release goes on in the background (or the lease runs out).
#[pyclass(module = "redmutex", name = "Lock", frozen)]
pub struct Lock {
    mutex: redmutex::Mutex,
    name_is_str: bool,
    ttl: Duration,
    slot: Mutex<Vec<Held>>,
    /// The user's `on_lost` callable; shared so that `__clear__` can break cycles through it.
    on_lost: Arc<Mutex<Option<Py<PyAny>>>>,
}

impl Lock {
    pub(crate) fn new(
        mutex: redmutex::Mutex,
        name_is_str: bool,
        on_lost: Option<Py<PyAny>>,
    ) -> Lock {
        Lock {
            ttl: mutex.current_options().ttl,
            mutex,
            name_is_str,
            slot: Mutex::new(Vec::new()),
            on_lost: Arc::new(Mutex::new(on_lost)),
        }
    }

    fn current(&self) -> Option<Arc<MutexGuard>> {
        let held = lock(&self.slot);
        pick(&held).map(|i| Arc::clone(&held[i].guard))
    }

    /// The current guard, or `NotHeldError`.
    fn guard(&self, py: Python<'_>) -> PyResult<Arc<MutexGuard>> {
        self.current()
            .ok_or_else(|| not_held(py, "this Lock is not acquired"))
    }

    fn take_lock(&self, py: Python<'_>, wait: Wait) -> PyResult<bool> {
        let mutex = self.mutex.clone();
        let result = interrupt::call(py, move |cancel| {
            let result = match wait {
                Wait::Once => mutex.try_lock(),
                Wait::Until(deadline) => {
                    mutex.lock_interruptible(deadline, &mut || cancel.load(Ordering::SeqCst))
                }
            };
            // The caller was interrupted and is gone: keep nothing it took meanwhile.
            if cancel.load(Ordering::SeqCst)
                && let Ok(guard) = result
            {
                drop(guard.unlock());
                return None;
            }
            Some(result)
        })?;
        match result {
            Some(Ok(guard)) => {
                // A signal that arrived during the last attempt is raised now, and the lock is
                // not kept: an interrupted acquire leaves nothing held.
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

    fn install(&self, py: Python<'_>, guard: MutexGuard) {
        let ended = Arc::new(Flag::default());
        let gate = Arc::new(Gate::new());
        let guard = Arc::new(guard);
        let (flag, call_gate) = (Arc::clone(&ended), Arc::clone(&gate));
        let callable = Arc::clone(&self.on_lost);
        // Runs on the core's renew thread, without the GIL.
        guard.on_lost(move || {
            flag.set();
            callbacks::call_soon(callable, call_gate);
        });
        let me = thread::current().id();
        let previous = {
            let mut held = lock(&self.slot);
            let previous = held
                .iter()
                .position(|h| h.thread == me)
                .map(|i| held.remove(i));
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

    fn release_inner(&self, py: Python<'_>) -> PyResult<()> {
        let held = {
            let mut held = lock(&self.slot);
            pick(&held).map(|i| held.remove(i))
        }
        .ok_or_else(|| not_held(py, "release unlocked lock"))?;
        // Interrupted, the release goes on in the background (or the lease runs out).
        let result = interrupt::call(py, move |_| {
            held.close();
            held.guard.release()
        })?;
        result.map(drop).map_err(|e| errors::to_py(py, e))
    }
}

#[pymethods]
impl Lock {
    /// Takes the lock and returns True, or returns False when the wait ran out.
    ///
    /// blocking: when false, make one attempt and return at once (a timeout is then a
    ///     ValueError, as with threading.Lock). None means True, as in redis-py.
    /// timeout: seconds to wait at most; None or -1 waits until the lock is free, 0 makes
    ///     one attempt.
    ///
    /// The GIL is released while waiting, and Ctrl-C interrupts the wait within 100 ms
    /// (KeyboardInterrupt; nothing is left held). Not re-entrant: acquiring a Lock that is
    /// held (by this object too) waits for its release, as threading.Lock does.
    ///
    /// Raises LockConnectionError or NoQuorumError when the nodes stay unreachable for the
    /// client's connect_timeout, AuthenticationError, ServerError, ValueError for bad
    /// arguments.
    #[pyo3(
        signature = (blocking = None, timeout = None),
        text_signature = "(self, blocking=True, timeout=None)"
    )]
    fn acquire(
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
        self.take_lock(py, wait)
    }

    /// Releases the lock on every node (only where it still holds our token), and stops its
    /// renewal.
    ///
    /// Raises NotHeldError when this Lock is not acquired, LockLostError when the lock had
    /// expired or been taken over (the other owner's value is left in place), NoQuorumError
    /// or LockConnectionError when not enough nodes confirmed (the lock then expires by its
    /// TTL).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.release_inner(py)
    }

    /// Whether anyone holds the lock, this process or another: asks Redis. See owned().
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        let mutex = self.mutex.clone();
        interrupt::call(py, move |_| mutex.is_locked())?.map_err(|e| errors::to_py(py, e))
    }

    /// Who holds the lock (this process or another), for how long, and its last fence number:
    /// asks Redis. For monitoring; the answer may be stale at once.
    ///
    /// Raises NoQuorumError or LockConnectionError when too few nodes answered.
    fn status(&self, py: Python<'_>) -> PyResult<LockStatus> {
        let mutex = self.mutex.clone();
        let status =
            interrupt::call(py, move |_| mutex.status())?.map_err(|e| errors::to_py(py, e))?;
        Ok(LockStatus::new(py, status))
    }

    /// Whether this Lock holds the lock now, answered locally (no network): acquired, not
    /// released, not lost, and within its validity. False in a forked child.
    fn owned(&self) -> bool {
        self.current().is_some_and(|g| g.is_held())
    }

    /// Raises unless owned(): LockLostError when the lock was acquired but lost (its message
    /// says why), NotHeldError when it is not acquired. No network; call it before each step of the critical section.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        self.guard(py)?.check().map_err(|e| errors::to_py(py, e))
    }

    /// Sets the lease to ttl seconds from now (redis-py's extend with replace_ttl=True);
    /// later automatic renewals use this ttl too. Never re-creates a lock that is gone.
    ///
    /// ttl: seconds, 0.01 to 86400.
    ///
    /// Raises NotHeldError, LockLostError when the lock is gone or someone else has it,
    /// NoQuorumError when not enough nodes confirmed, ValueError for a bad ttl.
    fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        let ttl = args::duration("ttl", ttl, redmutex::MIN_TTL, redmutex::MAX_TTL)?;
        let guard = self.guard(py)?;
        interrupt::call(py, move |_| guard.extend(ttl))?.map_err(|e| errors::to_py(py, e))
    }

    /// Blocks until the lock is lost (True), or timeout seconds pass or the lock is
    /// released (False); for watchdog threads. Returns False at once when not acquired.
    /// The GIL is released while waiting, and Ctrl-C interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
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

    /// The fence number of the current acquisition: strictly greater than that of every
    /// earlier holder of this name (0 when the lock was made with fencing=False). Pass it to
    /// the resource you protect, which should refuse writes carrying a lower number than one
    /// it has seen.
    ///
    /// Raises NotHeldError when this Lock is not acquired and LockLostError when it was lost:
    /// a stale holder never gets a number to write with.
    #[getter]
    fn fence(&self, py: Python<'_>) -> PyResult<u64> {
        let guard = self.guard(py)?;
        guard.check().map_err(|e| errors::to_py(py, e))?;
        Ok(guard.fence())
    }

    /// Seconds left of the current acquisition's validity (renewal moves it forward); 0.0
    /// when this Lock does not hold the lock. No network.
    #[getter]
    fn valid_for(&self) -> f64 {
        match self.current() {
            Some(g) if g.is_held() => g
                .valid_until()
                .saturating_duration_since(Instant::now())
                .as_secs_f64(),
            _ => 0.0,
        }
    }

    /// The lock's name (its Redis key), as given: str or bytes.
    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let name = self.mutex.name();
        if self.name_is_str {
            Ok(String::from_utf8_lossy(name).into_pyobject(py)?.into_any())
        } else {
            Ok(PyBytes::new(py, name).into_any())
        }
    }

    /// The lease in seconds, as given to Client.lock() (extend() changes the current one).
    #[getter]
    fn ttl(&self) -> f64 {
        self.ttl.as_secs_f64()
    }

    fn __enter__<'py>(slf: &Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, Self>> {
        slf.get().take_lock(py, Wait::Until(None))?;
        Ok(slf.clone())
    }

    #[pyo3(signature = (exc_type, exc_value, traceback, /))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let _ = (exc_type, exc_value, traceback);
        self.release_inner(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let name = self.name(py)?.repr()?;
        Ok(format!(
            "<redmutex.Lock name={name} ttl={:?} owned={}>",
            self.ttl.as_secs_f64(),
            if self.owned() { "True" } else { "False" }
        ))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never block in a traversal; a callable being handed out right now is seen next time.
        if let Ok(callable) = self.on_lost.try_lock() {
            visit.call(callable.as_ref())?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let callable = lock(&self.on_lost).take();
        drop(callable);
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let held = std::mem::take(self.slot.get_mut().unwrap_or_else(PoisonError::into_inner));
        if held.is_empty() {
            return;
        }
        // Dropping the guards releases the locks (best effort, bounded by the connect timeout);
        // let other threads run meanwhile, and the callback thread finish a call.
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
