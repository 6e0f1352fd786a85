//! `RwLock` and its two sides, `ReadLock` and `WriteLock`: many readers or one writer of a
//! name, fleet-wide. Each side is a lock object like `Lock`, its acquisitions kept by `Holds`.

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
use crate::source::{Reads, Writes};
use crate::status::RwLockStatus;

/// A name as given: str or bytes.
fn name_of<'py>(py: Python<'py>, name: &[u8], is_str: bool) -> PyResult<Bound<'py, PyAny>> {
    if is_str {
        Ok(String::from_utf8_lossy(name).into_pyobject(py)?.into_any())
    } else {
        Ok(PyBytes::new(py, name).into_any())
    }
}

/// The read-write lock's status.
fn status_of(py: Python<'_>, rwlock: &redmutex::RwLock) -> PyResult<RwLockStatus> {
    let rwlock = rwlock.clone();
    let status =
        interrupt::call(py, move |_| rwlock.status())?.map_err(|e| errors::to_py(py, e))?;
    RwLockStatus::new(py, status)
}

/// A distributed read-write lock made by Client.rwlock(): many readers or one writer of its
/// name at a time, across every process and machine that uses the name.
///
/// read_lock() and write_lock() give its two sides, each a lock object like Lock (acquire(),
/// release(), `with`, owned(), extend(), fence, on_lost, ...); they are the same two objects
/// on every call. Writers are preferred: once a writer waits, new readers queue behind it.
/// The write side is the lock of the same name, so Client.lock(name) excludes the readers.
#[pyclass(module = "redmutex", name = "RwLock", frozen)]
pub struct RwLock {
    read: Py<ReadLock>,
    write: Py<WriteLock>,
}

impl RwLock {
    pub(crate) fn new(
        py: Python<'_>,
        rwlock: redmutex::RwLock,
        name_is_str: bool,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<RwLock> {
        let ttl = rwlock.current_options().ttl;
        let write_on_lost = on_lost.as_ref().map(|c| c.clone_ref(py));
        let read = ReadLock {
            holds: Holds::new(
                Reads(rwlock.clone()),
                true,
                Words {
                    not_acquired: "this ReadLock is not acquired",
                    release_unheld: "release unlocked lock",
                },
                on_lost,
            ),
            name_is_str,
            ttl,
        };
        let write = WriteLock {
            holds: Holds::new(
                Writes(rwlock),
                false,
                Words {
                    not_acquired: "this WriteLock is not acquired",
                    release_unheld: "release unlocked lock",
                },
                write_on_lost,
            ),
            name_is_str,
            ttl,
        };
        Ok(RwLock {
            read: Py::new(py, read)?,
            write: Py::new(py, write)?,
        })
    }
}

#[pymethods]
impl RwLock {
    /// The read side: a lock object of which many threads and processes may hold the lock
    /// at once (and one thread several times), while no writer holds or waits for it.
    fn read_lock(&self, py: Python<'_>) -> Py<ReadLock> {
        self.read.clone_ref(py)
    }

    /// The write side: a lock object like Lock (not re-entrant), held by one thread at a
    /// time and only while no reader holds the lock.
    fn write_lock(&self, py: Python<'_>) -> Py<WriteLock> {
        self.write.clone_ref(py)
    }

    /// The writer (with the last fence number) and the live read holds: asks Redis. For
    /// monitoring; the answer may be stale at once.
    fn status(&self, py: Python<'_>) -> PyResult<RwLockStatus> {
        status_of(py, &self.write.get().holds.source().0)
    }

    /// The name (the Redis key of the write side), as given: str or bytes.
    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.write.get().name(py)
    }

    /// The lease of each hold in seconds, as given to Client.rwlock().
    #[getter]
    fn ttl(&self) -> f64 {
        self.write.get().ttl.as_secs_f64()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "<redmutex.RwLock name={} ttl={:?}>",
            self.name(py)?.repr()?,
            self.ttl()
        ))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.read)?;
        visit.call(&self.write)
    }
}

/// One side of an RwLock: the same methods as Lock, on read or write holds.
macro_rules! side {
    ($(#[$meta:meta])* $class:ident, $source:ty, $held:ident) => {
        $(#[$meta])*
        pub struct $class {
            holds: Holds<$source>,
            name_is_str: bool,
            ttl: Duration,
        }

        #[pymethods]
        impl $class {
            /// Takes the lock and returns True, or returns False when the wait ran out.
            ///
            /// blocking: when false, make one attempt and return at once (a timeout is then
            ///     a ValueError). None means True.
            /// timeout: seconds to wait at most; None or -1 waits until granted, 0 makes one
            ///     attempt. Ctrl-C interrupts the wait (nothing is left held).
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

            /// Releases the calling thread's most recent hold (or, for a thread that holds
            /// none, the most recent one). Raises NotHeldError when none is held,
            /// LockLostError when it had been lost.
            fn release(&self, py: Python<'_>) -> PyResult<()> {
                self.holds.release(py)
            }

            /// Whether anyone holds this side (this process or another): asks Redis.
            fn locked(&self, py: Python<'_>) -> PyResult<bool> {
                let status = status_of(py, &self.holds.source().0)?;
                Ok(status.$held())
            }

            /// Whether the current hold is held now, answered locally (no network).
            fn owned(&self) -> bool {
                self.holds.owned()
            }

            /// Raises unless owned(): LockLostError when the hold was lost, NotHeldError when
            /// none is held. No network.
            fn check(&self, py: Python<'_>) -> PyResult<()> {
                self.holds.check(py)
            }

            /// Extends the current hold's lease to ttl seconds from now (0.01 to 86400); the
            /// servers only ever lengthen an expiry (a shorter ttl never cuts it short).
            fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
                self.holds.extend(py, ttl)
            }

            /// Blocks until the current hold is lost (True), or timeout seconds pass or it is
            /// released (False). False at once when none is held.
            #[pyo3(signature = (timeout = None))]
            fn wait_lost(
                &self,
                py: Python<'_>,
                timeout: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<bool> {
                self.holds.wait_lost(py, timeout)
            }

            /// The current hold's fence number (see the class). Raises NotHeldError or
            /// LockLostError.
            #[getter]
            fn fence(&self, py: Python<'_>) -> PyResult<u64> {
                self.holds.fence(py)
            }

            /// Seconds left of the current hold's validity; 0.0 when none is held.
            #[getter]
            fn valid_for(&self) -> f64 {
                self.holds.valid_for()
            }

            /// The name, as given: str or bytes.
            #[getter]
            fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                name_of(py, self.holds.source().0.name(), self.name_is_str)
            }

            /// The lease in seconds, as given to Client.rwlock().
            #[getter]
            fn ttl(&self) -> f64 {
                self.ttl.as_secs_f64()
            }

            fn __enter__<'py>(
                slf: &Bound<'py, Self>,
                py: Python<'py>,
            ) -> PyResult<Bound<'py, Self>> {
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
                Ok(format!(
                    "<redmutex.{} name={} ttl={:?} owned={}>",
                    stringify!($class),
                    self.name(py)?.repr()?,
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
    };
}

side!(
    /// The read side of an RwLock (RwLock.read_lock()): a lock object like Lock, of which
    /// several holders may hold the lock at once, and one thread several times (each
    /// acquire() is a hold of its own; release() gives back the thread's most recent).
    /// A read hold's fence is that of the last write it may observe, not a new number.
    /// Ctrl-C interrupts its waits on the main thread, as for Lock.
    #[pyclass(module = "redmutex", name = "ReadLock", frozen)]
    ReadLock,
    Reads,
    has_readers
);

side!(
    /// The write side of an RwLock (RwLock.write_lock()): a lock object like Lock, and the
    /// same lock as Client.lock() of the name. Not re-entrant. Its fence is greater than that
    /// of every earlier write, lock and read hold of the name. Ctrl-C interrupts its waits on
    /// the main thread, as for Lock.
    #[pyclass(module = "redmutex", name = "WriteLock", frozen)]
    WriteLock,
    Writes,
    has_writer
);
