//! `ClientStats` and `Histogram`: what `Client.stats()` returns.

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

/// What one client's locks did since it was made, and what they hold and wait for now.
///
/// Counted by the library as it goes; a snapshot. An acquire ends in exactly one of acquired,
/// refused, timed_out, interrupted and failed; lost_by's values add up to lost.
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
    /// Held locks lost, whatever the reason.
    lost: u64,
    /// Losses by reason: another_owner, gone, nodes_down, validity_ran_out, max_hold.
    lost_by: std::collections::BTreeMap<&'static str, u64>,
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
}

impl ClientStats {
    pub(crate) fn new(py: Python<'_>, s: redmutex::ClientStats) -> PyResult<ClientStats> {
        let lost_by = redmutex::LossReason::ALL
            .iter()
            .map(|&r| (r.name(), s.lost_by.get(r)))
            .collect();
        Ok(ClientStats {
            acquired: s.acquired,
            refused: s.refused,
            timed_out: s.timed_out,
            interrupted: s.interrupted,
            failed: s.failed,
            lost: s.lost,
            lost_by,
            renewals: s.renewals,
            renewal_failures: s.renewal_failures,
            held_now: s.held_now,
            waiting_now: s.waiting_now,
            wait_seconds: Py::new(py, Histogram::new(s.wait_seconds))?,
            held_seconds: Py::new(py, Histogram::new(s.held_seconds))?,
        })
    }
}

#[pymethods]
impl ClientStats {
    fn __repr__(&self) -> String {
        format!(
            "ClientStats(acquired={}, refused={}, timed_out={}, interrupted={}, failed={}, \
             lost={}, renewals={}, renewal_failures={}, held_now={}, waiting_now={})",
            self.acquired,
            self.refused,
            self.timed_out,
            self.interrupted,
            self.failed,
            self.lost,
            self.renewals,
            self.renewal_failures,
            self.held_now,
            self.waiting_now
        )
    }
}
