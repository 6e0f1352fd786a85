//! `Semaphore`: at most N holders of one name, fleet-wide, with the API of
//! `threading.BoundedSemaphore`; each permit is an acquisition of `Holds`, as a Lock's.

use std::time::Duration;

use pyo3::PyTraverseError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt};

use crate::aio::{Canceller, Grant};
use crate::args::Wait;
use crate::errors::{self, not_held};
use crate::interrupt;
use crate::lease::{Holds, Words};
use crate::status::SemaphoreStatus;

const RELEASED_TOO_MANY: &str = "Semaphore released too many times";

/// A distributed counting semaphore made by Client.semaphore(): at most `permits` holders of
/// its name at a time, across every process and machine that uses the name.
///
/// Mirrors threading.BoundedSemaphore: acquire(blocking=True, timeout=None) takes one
/// permit, release(n=1) gives back n, `with sem:` holds one for the block. Each permit is a
/// lease like a Lock's: renewed in the background while held, lost after its ttl when its
/// holder dies or stalls, with its own fence number. One Semaphore object may hold several
/// permits at once (one per acquire). A permit belongs to the thread that took it:
/// release(), extend(), check(), owned(), fence, valid_for and wait_lost() act on the calling
/// thread's most recent permit, or, for a thread that holds none, on the most recent permit of
/// this object. Releasing when this object holds no permit raises NotHeldError (a
/// RuntimeError; threading.BoundedSemaphore raises ValueError there). Ctrl-C interrupts the
/// waits on the main thread, as for Lock.
#[pyclass(module = "redmutex", name = "Semaphore", frozen)]
pub struct Semaphore {
    holds: Holds<redmutex::Semaphore>,
    name_is_str: bool,
    ttl: Duration,
}

impl Semaphore {
    pub(crate) fn new(
        semaphore: redmutex::Semaphore,
        name_is_str: bool,
        on_lost: Option<Py<PyAny>>,
    ) -> Semaphore {
        let words = Words {
            not_acquired: "this Semaphore holds no permit",
            release_unheld: RELEASED_TOO_MANY,
        };
        Semaphore {
            ttl: semaphore.current_options().ttl,
            holds: Holds::new(semaphore, true, words, on_lost),
            name_is_str,
        }
    }
}

#[pymethods]
impl Semaphore {
    /// Takes one permit and returns True, or returns False when the wait ran out.
    ///
    /// blocking: when false, make one attempt and return at once (a timeout is then a
    ///     ValueError). None means True.
    /// timeout: seconds to wait at most; None or -1 waits until a permit is free, 0 makes
    ///     one attempt.
    ///
    /// A release wakes one waiter within about a round trip; waiters are served before
    /// newcomers. Raises ValueError when live permits of this name were taken with another
    /// count, or on a client of several independent masters; otherwise as Lock.acquire().
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

    /// Gives back n permits (default 1): the calling thread's most recent first, then the
    /// most recent of this object. Nothing is released when this object holds fewer than n.
    ///
    /// Raises NotHeldError when this Semaphore holds fewer than n permits, LockLostError when
    /// a permit had expired (the others are released still), ValueError when n is below 1.
    #[pyo3(signature = (n = None), text_signature = "(self, n=1)")]
    fn release(&self, py: Python<'_>, n: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let Some(n) = n else {
            return self.holds.release(py);
        };
        if n.is_instance_of::<PyBool>() || !n.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "n must be an int, got {}",
                n.get_type().name()?
            )));
        }
        let n: i64 = n.extract().unwrap_or(i64::MAX);
        if n < 1 {
            return Err(PyValueError::new_err("n must be one or more"));
        }
        if usize::try_from(n).map_or(true, |n| n > self.holds.count()) {
            return Err(not_held(py, RELEASED_TOO_MANY));
        }
        let mut first = None;
        for _ in 0..n {
            if let Err(e) = self.holds.release(py) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The live permits of this name (every holder's), the count they were taken with, and
    /// the last fence number: asks Redis. For monitoring; the answer may be stale at once.
    fn status(&self, py: Python<'_>) -> PyResult<SemaphoreStatus> {
        let semaphore = self.holds.source().clone();
        let status =
            interrupt::call(py, move |_| semaphore.status())?.map_err(|e| errors::to_py(py, e))?;
        Ok(SemaphoreStatus::new(py, status))
    }

    /// Whether no permit can be taken now, as asyncio.Semaphore.locked(): every permit of
    /// this name is held (by this process or another). Asks Redis; the answer may be stale at
    /// once. A free permit that announced waiters come before a newcomer for counts as free.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.status(py)?.all_taken())
    }

    /// Whether the current permit (see the class) is held now, answered locally.
    fn owned(&self) -> bool {
        self.holds.owned()
    }

    /// Raises unless owned(): LockLostError when the current permit was lost, NotHeldError
    /// when this Semaphore holds none. No network.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        self.holds.check(py)
    }

    /// Extends the current permit's lease to ttl seconds from now (0.01 to 86400); later
    /// renewals of that permit use this ttl too. The servers only ever lengthen an expiry
    /// (a shorter ttl never cuts it short).
    fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        self.holds.extend(py, ttl)
    }

    /// Blocks until the current permit is lost (True), or timeout seconds pass or it is
    /// released (False). False at once when this Semaphore holds none.
    #[pyo3(signature = (timeout = None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        self.holds.wait_lost(py, timeout)
    }

    /// The fence number of the current permit: greater than that of every earlier permit
    /// (and lock) of this name. Several permits are held at once, so a resource shared by the
    /// holders must accept each holder's own fence. Raises NotHeldError or LockLostError.
    #[getter]
    fn fence(&self, py: Python<'_>) -> PyResult<u64> {
        self.holds.fence(py)
    }

    /// Seconds left of the current permit's validity; 0.0 when none is held. No network.
    #[getter]
    fn valid_for(&self) -> f64 {
        self.holds.valid_for()
    }

    /// The number of permits of this name.
    #[getter]
    fn permits(&self) -> u32 {
        self.holds.source().permits()
    }

    /// The semaphore's name, as given: str or bytes.
    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let name = self.holds.source().name();
        if self.name_is_str {
            Ok(String::from_utf8_lossy(name).into_pyobject(py)?.into_any())
        } else {
            Ok(PyBytes::new(py, name).into_any())
        }
    }

    /// The lease of each permit in seconds, as given to Client.semaphore().
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
            "<redmutex.Semaphore name={name} permits={} ttl={:?} held={}>",
            self.permits(),
            self.ttl.as_secs_f64(),
            self.holds.count()
        ))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.holds.traverse(&visit)
    }

    fn __clear__(&self) {
        self.holds.clear();
    }
}
