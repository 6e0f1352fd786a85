//! `ClientStats`, `Histogram` and `Outcomes`: what `Client.stats()` returns.

use std::collections::BTreeMap;

use pyo3::prelude::*;

/// Durations in fixed buckets, in seconds.
///
/// bounds: the buckets' upper bounds, 100 µs to 60 s (the same in every histogram).
/// buckets: how many durations fell in each bucket: buckets[i] counts those above
///     bounds[i - 1] (0 for the first) and at most bounds[i]; the last one those above the
///     last bound. Not cumulative.
/// count: how many durations were recorded.
/// sum: their sum.
#[pyclass(module = "redmutex", name = "Histogram", frozen, get_all)]
pub struct Histogram {
    bounds: Vec<f64>,
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn new(h: redmutex::Histogram) -> Histogram {
        Histogram {
            bounds: h.bounds().to_vec(),
            buckets: h.buckets,
            count: h.count,
            sum: h.sum,
        }
    }
}

#[pymethods]
impl Histogram {
    fn __repr__(&self) -> String {
        format!("Histogram(count={}, sum={:.6})", self.count, self.sum)
    }
}

/// How one kind of lock's acquisitions ended: each in exactly one of the five.
///
/// acquired: granted.
/// refused: refused at once (blocking=False).
/// timed_out: their wait ran out.
/// interrupted: ended by a signal handler's exception (Ctrl-C).
/// failed: failed with an error.
#[pyclass(module = "redmutex", name = "Outcomes", frozen, get_all)]
pub struct Outcomes {
    acquired: u64,
    refused: u64,
    timed_out: u64,
    interrupted: u64,
    failed: u64,
}

impl Outcomes {
    fn new(o: redmutex::Outcomes) -> Outcomes {
        Outcomes {
            acquired: o.acquired,
            refused: o.refused,
            timed_out: o.timed_out,
            interrupted: o.interrupted,
            failed: o.failed,
        }
    }
}

#[pymethods]
impl Outcomes {
    fn __repr__(&self) -> String {
        format!(
            "Outcomes(acquired={}, refused={}, timed_out={}, interrupted={}, failed={})",
            self.acquired, self.refused, self.timed_out, self.interrupted, self.failed
        )
    }
}

/// What one client's locks did since it was made, and what they hold and wait for now.
///
/// Counted by the library as it goes; a snapshot. An acquire ends in exactly one of acquired,
/// refused, timed_out, interrupted and failed, and under one kind of by_kind; lost_by's values
/// add up to lost.
#[pyclass(module = "redmutex", name = "ClientStats", frozen, get_all)]
pub struct ClientStats {
    /// Acquisitions granted.
    acquired: u64,
    /// Acquisitions refused at once (blocking=False).
    refused: u64,
    /// Acquisitions whose wait ran out.
    timed_out: u64,
    /// Acquisitions ended by a signal handler's exception (Ctrl-C).
    interrupted: u64,
    /// Acquisitions that failed with an error.
    failed: u64,
    /// The same acquisitions by kind of lock: mutex (Lock, and RwLock's write side),
    /// semaphore, read (RwLock's read side).
    by_kind: BTreeMap<&'static str, Py<Outcomes>>,
    /// Acquisitions granted after waiting for a release (hand-offs received).
    handoffs: u64,
    /// Held locks lost, whatever the reason.
    lost: u64,
    /// Losses by reason: another_owner, gone, nodes_down, validity_ran_out, max_hold.
    lost_by: BTreeMap<&'static str, u64>,
    /// Renewals the renew thread got confirmed.
    renewals: u64,
    /// Renewal rounds that were not confirmed.
    renewal_failures: u64,
    /// Leases held now.
    held_now: u64,
    /// Acquisitions that may wait and have not returned yet.
    waiting_now: u64,
    /// For every granted acquisition, the time from the call to the grant.
    wait_seconds: Py<Histogram>,
    /// For every lease that ended (released or lost), how long it was held.
    held_seconds: Py<Histogram>,
    /// For every renewal the renew thread sent, how late it was against its schedule.
    renewal_lag_seconds: Py<Histogram>,
    /// Connections open now to each node, in the order of the client's nodes.
    connections: Vec<u64>,
}

impl ClientStats {
    pub(crate) fn new(py: Python<'_>, s: redmutex::ClientStats) -> PyResult<ClientStats> {
        let lost_by = redmutex::LossReason::ALL
            .iter()
            .map(|&r| (r.name(), s.lost_by.get(r)))
            .collect();
        let k = s.by_kind;
        let by_kind = [
            ("mutex", k.mutex),
            ("semaphore", k.semaphore),
            ("read", k.read),
        ]
        .into_iter()
        .map(|(name, o)| Ok((name, Py::new(py, Outcomes::new(o))?)))
        .collect::<PyResult<_>>()?;
        Ok(ClientStats {
            acquired: s.acquired,
            refused: s.refused,
            timed_out: s.timed_out,
            interrupted: s.interrupted,
            failed: s.failed,
            by_kind,
            handoffs: s.handoffs,
            lost: s.lost,
            lost_by,
            renewals: s.renewals,
            renewal_failures: s.renewal_failures,
            held_now: s.held_now,
            waiting_now: s.waiting_now,
            wait_seconds: Py::new(py, Histogram::new(s.wait_seconds))?,
            held_seconds: Py::new(py, Histogram::new(s.held_seconds))?,
            renewal_lag_seconds: Py::new(py, Histogram::new(s.renewal_lag_seconds))?,
            connections: s.connections,
        })
    }
}

#[pymethods]
impl ClientStats {
    fn __repr__(&self) -> String {
        format!(
            "ClientStats(acquired={}, refused={}, timed_out={}, interrupted={}, failed={}, \
             handoffs={}, lost={}, renewals={}, renewal_failures={}, held_now={}, \
             waiting_now={}, connections={:?})",
            self.acquired,
            self.refused,
            self.timed_out,
            self.interrupted,
            self.failed,
            self.handoffs,
            self.lost,
            self.renewals,
            self.renewal_failures,
            self.held_now,
            self.waiting_now,
            self.connections
        )
    }
}
