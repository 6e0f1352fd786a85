//! `Lock`: one lock name with its options, and the guards of its acquisitions, one per thread
//! that acquired it (the machinery is `Holds`, shared with the other kinds of lock).

use std::time::Duration;

use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::aio::{Canceller, Grant};
use crate::args::Wait;
use crate::errors;
use crate::interrupt;
use crate::lease::{Holds, Words};
use crate::status::LockStatus;

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
    holds: Holds<redmutex::Mutex>,
    name_is_str: bool,
    ttl: Duration,
}

impl Lock {
    pub(crate) fn new(
        mutex: redmutex::Mutex,
        name_is_str: bool,
        on_lost: Option<Py<PyAny>>,
    ) -> Lock {
        let words = Words {
            not_acquired: "this Lock is not acquired",
            release_unheld: "release unlocked lock",
        };
        Lock {
            ttl: mutex.current_options().ttl,
            holds: Holds::new(mutex, false, words, on_lost),
            name_is_str,
        }
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
        self.holds.acquire(py, blocking, timeout)
    }

    /// For `redmutex.asyncio`, on a thread of its pool: acquire(blocking, timeout) ended at
    /// once by `canceller`, the lease handed back as a Grant (None: not acquired).
    #[pyo3(signature = (blocking, timeout, canceller))]
    fn _take(
        &self,
        py: Python<'_>,
        blocking: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        canceller: &Canceller,
    ) -> PyResult<Option<Grant>> {
        self.holds.take_for_task(py, blocking, timeout, canceller)
    }

    /// For `redmutex.asyncio`, on the loop's thread: makes a Grant this object's acquisition
    /// (local).
    fn _install(&self, grant: &Grant) -> PyResult<()> {
        self.holds.install_grant(grant)
    }

    /// Releases the lock on every node (only where it still holds our token), and stops its
    /// renewal.
    ///
    /// Raises NotHeldError when this Lock is not acquired, LockLostError when the lock had
    /// expired or been taken over (the other owner's value is left in place), NoQuorumError
    /// or LockConnectionError when not enough nodes confirmed (the lock then expires by its
    /// TTL).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.holds.release(py)
    }

    /// Whether anyone holds the lock, this process or another: asks Redis. See owned().
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        let mutex = self.holds.source().clone();
        interrupt::call(py, move |_| mutex.is_locked())?.map_err(|e| errors::to_py(py, e))
    }

    /// Who holds the lock (this process or another), for how long, and its last fence number:
    /// asks Redis. For monitoring; the answer may be stale at once.
    ///
    /// Raises NoQuorumError or LockConnectionError when too few nodes answered.
    fn status(&self, py: Python<'_>) -> PyResult<LockStatus> {
        let mutex = self.holds.source().clone();
        let status =
            interrupt::call(py, move |_| mutex.status())?.map_err(|e| errors::to_py(py, e))?;
        Ok(LockStatus::new(py, status))
    }

    /// Whether this Lock holds the lock now, answered locally (no network): acquired, not
    /// released, not lost, and within its validity. False in a forked child.
    fn owned(&self) -> bool {
        self.holds.owned()
    }

    /// Raises unless owned(): LockLostError when the lock was acquired but lost (its message
    /// says why), NotHeldError when it is not acquired. No network; call it before each step of the critical section.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        self.holds.check(py)
    }

    /// Extends the lease to ttl seconds from now (like redis-py's extend with
    /// replace_ttl=True); later automatic renewals use this ttl too. Never re-creates a lock
    /// that is gone. The servers only ever lengthen an expiry: with a ttl shorter than the
    /// lease has left, the key keeps its later expiry there (a request that arrives late must
    /// never cut a longer lease short), while the lock counts itself valid for ttl from now.
    ///
    /// ttl: seconds, 0.01 to 86400.
    ///
    /// Raises NotHeldError, LockLostError when the lock is gone or someone else has it,
    /// NoQuorumError when not enough nodes confirmed, ValueError for a bad ttl.
    fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        self.holds.extend(py, ttl)
    }

    /// Blocks until the lock is lost (True), or timeout seconds pass or the lock is
    /// released (False); for watchdog threads. Returns False at once when not acquired.
    /// The GIL is released while waiting, and Ctrl-C interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        self.holds.wait_lost(py, timeout)
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
        self.holds.fence(py)
    }

    /// Seconds left of the current acquisition's validity (renewal moves it forward); 0.0
    /// when this Lock does not hold the lock. No network.
    #[getter]
    fn valid_for(&self) -> f64 {
        self.holds.valid_for()
    }

    /// The lock's name (its Redis key), as given: str or bytes.
    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let name = self.holds.source().name();
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
        slf.get().holds.take(py, Wait::Until(None))?;
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
        self.holds.release(py)
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
        self.holds.traverse(&visit)
    }

    fn __clear__(&self) {
        self.holds.clear();
    }
}
