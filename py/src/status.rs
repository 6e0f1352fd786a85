//! `LockStatus`: what `Lock.status()` found in Redis.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Who holds a lock, for how long, and the last fence number granted for its name, as Redis
/// had it when Lock.status() asked (it may be stale at once: for monitoring, never instead of
/// taking the lock). What `redmutex status` shows.
///
/// holder: the holder's value (b"owner-label:random-hex" for redmutex holders, so it tells who
///     holds it), or None when the lock is free.
/// ttl: seconds left of the holder's lease, or None when the lock is free or never expires.
/// fence: the last fence number granted for the name (0 when none was).
#[pyclass(module = "redmutex", name = "LockStatus", frozen, get_all)]
pub struct LockStatus {
    holder: Option<Py<PyBytes>>,
    ttl: Option<f64>,
    fence: u64,
}

impl LockStatus {
    pub(crate) fn new(py: Python<'_>, status: redmutex::LockStatus) -> LockStatus {
        LockStatus {
            holder: status.holder.map(|h| PyBytes::new(py, &h).unbind()),
            ttl: status.ttl.map(|t| t.as_secs_f64()),
            fence: status.fence,
        }
    }

    /// Whether the lock was held.
    pub(crate) fn is_held(&self) -> bool {
        self.holder.is_some()
    }
}

#[pymethods]
impl LockStatus {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let holder = match &self.holder {
            Some(h) => h.bind(py).repr()?.to_string(),
            None => "None".to_owned(),
        };
        let ttl = self.ttl.map_or("None".to_owned(), |t| format!("{t:.3}"));
        Ok(format!(
            "LockStatus(holder={holder}, ttl={ttl}, fence={})",
            self.fence
        ))
    }
}

/// The live holds of a name: each one's value and seconds left.
fn holds(py: Python<'_>, holds: Vec<(Vec<u8>, Duration)>) -> Vec<(Py<PyBytes>, f64)> {
    holds
        .into_iter()
        .map(|(token, left)| (PyBytes::new(py, &token).unbind(), left.as_secs_f64()))
        .collect()
}

fn holds_repr(py: Python<'_>, holds: &[(Py<PyBytes>, f64)]) -> PyResult<String> {
    let items: PyResult<Vec<String>> = holds
        .iter()
        .map(|(token, left)| Ok(format!("({}, {left:.3})", token.bind(py).repr()?)))
        .collect();
    Ok(format!("[{}]", items?.join(", ")))
}

/// The live permits of a semaphore's name, as Redis had them when Semaphore.status() asked
/// (for monitoring; it may be stale at once).
///
/// permits: the count the live permits were taken with, or None when no permit is held.
/// holders: each live permit's value and seconds left, as (bytes, float) tuples.
/// fence: the last fence number granted for the name (0 when none was).
#[pyclass(module = "redmutex", name = "SemaphoreStatus", frozen, get_all)]
pub struct SemaphoreStatus {
    permits: Option<u32>,
    holders: Vec<(Py<PyBytes>, f64)>,
    fence: u64,
}

impl SemaphoreStatus {
    pub(crate) fn new(py: Python<'_>, status: redmutex::SemaphoreStatus) -> SemaphoreStatus {
        SemaphoreStatus {
            permits: status.permits,
            holders: holds(py, status.holders),
            fence: status.fence,
        }
    }

    /// Whether every permit of the count in force is live (none is, with no permit held).
    pub(crate) fn all_taken(&self) -> bool {
        self.permits
            .is_some_and(|permits| self.holders.len() >= permits as usize)
    }
}

#[pymethods]
impl SemaphoreStatus {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let permits = self.permits.map_or("None".to_owned(), |p| p.to_string());
        Ok(format!(
            "SemaphoreStatus(permits={permits}, holders={}, fence={})",
            holds_repr(py, &self.holders)?,
            self.fence
        ))
    }
}

/// The writer and the readers of a read-write lock's name, as Redis had them when
/// RwLock.status() asked (for monitoring; it may be stale at once).
///
/// writer: the write side's LockStatus (a writer, a Client.lock() holder of the same name,
///     or any SET NX holder), with the last fence number.
/// readers: each live read hold's value and seconds left, as (bytes, float) tuples.
#[pyclass(module = "redmutex", name = "RwLockStatus", frozen, get_all)]
pub struct RwLockStatus {
    writer: Py<LockStatus>,
    readers: Vec<(Py<PyBytes>, f64)>,
}

impl RwLockStatus {
    pub(crate) fn new(py: Python<'_>, status: redmutex::RwLockStatus) -> PyResult<RwLockStatus> {
        Ok(RwLockStatus {
            writer: Py::new(py, LockStatus::new(py, status.writer))?,
            readers: holds(py, status.readers),
        })
    }

    pub(crate) fn has_writer(&self) -> bool {
        self.writer.get().is_held()
    }

    pub(crate) fn has_readers(&self) -> bool {
        !self.readers.is_empty()
    }
}

#[pymethods]
impl RwLockStatus {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "RwLockStatus(writer={}, readers={})",
            self.writer.bind(py).repr()?,
            holds_repr(py, &self.readers)?
        ))
    }
}
