//! `LockStatus`: what `Lock.status()` found in Redis.

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
