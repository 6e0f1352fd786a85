//! `ListedLock` and `ListedHold`: what `Client.list()` and `Client.force_unlock()` return.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// One hold of a lock, as the nodes that have it see it (Client.list()), or one that
/// Client.force_unlock() removed.
///
/// kind: "exclusive" (a Lock, or an RwLock's writer: the same hold), "read" (an RwLock's
///     reader) or "permit" (a Semaphore's).
/// holder: the holder's value (b"owner-label:random-hex" for redmutex holders).
/// ttl: seconds left of its lease, the shortest among the nodes that have it (for a removed
///     hold, what it had left); None for a key without expiry (not one redmutex set).
/// nodes: on how many nodes it is (listed), or was removed from (force_unlock()).
#[pyclass(module = "redmutex", name = "ListedHold", frozen, get_all)]
pub struct ListedHold {
    kind: &'static str,
    holder: Py<PyBytes>,
    ttl: Option<f64>,
    nodes: usize,
}

impl ListedHold {
    pub(crate) fn new(py: Python<'_>, hold: &redmutex::ListedHold) -> ListedHold {
        ListedHold {
            kind: hold.kind.as_str(),
            holder: PyBytes::new(py, &hold.holder).unbind(),
            ttl: hold.ttl.map(|t| t.as_secs_f64()),
            nodes: hold.nodes,
        }
    }
}

#[pymethods]
impl ListedHold {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let ttl = self.ttl.map_or("None".to_owned(), |t| format!("{t:.3}"));
        Ok(format!(
            "ListedHold(kind={}, holder={}, ttl={ttl}, nodes={})",
            PyString::new(py, self.kind).repr()?,
            self.holder.bind(py).repr()?,
            self.nodes
        ))
    }
}

/// One lock that Client.list() found: held, or waited for, as the nodes had it when asked
/// (for monitoring; it may be stale at once).
///
/// name: the lock's name: str when the pattern was a str (bytes for a name that is not
///     UTF-8), bytes when it was bytes; either may be passed back to force_unlock().
/// holds: its holds (ListedHold), by kind, then holder; empty for a lock listed only for
///     its waiters.
/// fence: the last fence number granted for the name (the largest among the nodes).
/// waiters: how many callers have announced that they wait for it (the most any node
///     counts).
/// nodes: how many nodes answered.
/// disagree: whether the nodes that answered disagree: some hold is not on every one of them
///     (a Redlock node that missed a grant or a release; it settles as leases run out).
#[pyclass(module = "redmutex", name = "ListedLock", frozen, get_all)]
pub struct ListedLock {
    name: Py<PyAny>,
    holds: Vec<Py<ListedHold>>,
    fence: u64,
    waiters: u64,
    nodes: usize,
    disagree: bool,
}

impl ListedLock {
    /// `lock` for Python; its name as a str when `name_is_str` and it is UTF-8.
    pub(crate) fn new(
        py: Python<'_>,
        lock: &redmutex::ListedLock,
        name_is_str: bool,
    ) -> PyResult<ListedLock> {
        let name = match std::str::from_utf8(&lock.name) {
            Ok(s) if name_is_str => PyString::new(py, s).into_any().unbind(),
            _ => PyBytes::new(py, &lock.name).into_any().unbind(),
        };
        let holds = lock
            .holds
            .iter()
            .map(|h| Py::new(py, ListedHold::new(py, h)))
            .collect::<PyResult<_>>()?;
        Ok(ListedLock {
            name,
            holds,
            fence: lock.fence,
            waiters: lock.waiters,
            nodes: lock.nodes,
            disagree: lock.disagree(),
        })
    }
}

#[pymethods]
impl ListedLock {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let holds: PyResult<Vec<String>> = self
            .holds
            .iter()
            .map(|h| Ok(h.bind(py).repr()?.to_string()))
            .collect();
        Ok(format!(
            "ListedLock(name={}, holds=[{}], fence={}, waiters={}, nodes={})",
            self.name.bind(py).repr()?,
            holds?.join(", "),
            self.fence,
            self.waiters,
            self.nodes
        ))
    }
}
