//! A client's figures as they are counted: atomics only, so that counting costs a lock call
//! a few uncontended increments and no lock or allocation. [`Counters::snapshot`] copies
//! them into the public [`ClientStats`]. With the `metrics` feature, each figure also goes to
//! the `metrics` facade as it is counted (see [`facade`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::proto::Kind;
use crate::error::{ErrorKind, TryLockError};
use crate::stats::{
    ByKind, ClientStats, HISTOGRAM_BOUNDS, Histogram, LossReason, LostBy, Outcomes,
};

const BUCKETS: usize = HISTOGRAM_BOUNDS.len() + 1;

/// The bucket bounds in nanoseconds, for a comparison of integers per observation.
const BOUNDS_NS: [u64; HISTOGRAM_BOUNDS.len()] = {
    let mut ns = [0; HISTOGRAM_BOUNDS.len()];
    let mut i = 0;
    while i < ns.len() {
        ns[i] = (HISTOGRAM_BOUNDS[i] * 1e9) as u64;
        i += 1;
    }
    ns
};

#[derive(Default)]
struct Buckets {
    counts: [AtomicU64; BUCKETS],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Buckets {
    fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        self.counts[i].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    fn snapshot(&self) -> Histogram {
        Histogram {
            buckets: self.counts.iter().map(|c| c.load(Relaxed)).collect(),
            count: self.count.load(Relaxed),
            sum: self.sum_ns.load(Relaxed) as f64 / 1e9,
        }
    }
}

/// One client's counters, kept in its [`Voters`](super::voters::Voters).
#[derive(Default)]
pub(crate) struct Counters {
    /// Each kind's acquisitions (mutex, semaphore, read; see [`kind_index`]) by outcome
    /// (acquired, refused, timed out, interrupted, failed).
    by_kind: [[AtomicU64; 5]; 3],
    handoffs: AtomicU64,
    lost: [AtomicU64; LossReason::ALL.len()],
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    held_now: AtomicU64,
    waiting_now: AtomicU64,
    wait: Buckets,
    held: Buckets,
    renewal_lag: Buckets,
    /// With the `metrics` feature: the byte a name's label prefix ends before (see
    /// `ClientBuilder::metrics_prefix_label`).
    prefix_label: Option<u8>,
}

impl Counters {
    /// An acquisition call that may wait begins: it counts in `waiting_now` until its
    /// [`Waiting`] is dropped.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.waiting_now.fetch_add(1, Relaxed);
        facade::waiting(1.0);
        Waiting(self)
    }

    /// Counters whose `metrics` figures carry a `prefix` label: the lock name up to the first
    /// `separator`.
    pub(crate) fn with_prefix_label(separator: Option<u8>) -> Counters {
        Counters {
            prefix_label: separator,
            ..Counters::default()
        }
    }

    /// How an acquisition call of a `kind` of lock on `name` that began `took` ago ended;
    /// `waited` says whether it could wait (a refusal is then a wait that ran out), and
    /// `had_waited` whether it waited for a release before the end (a grant is then a
    /// hand-off received).
    pub(crate) fn acquisition<T>(
        &self,
        (kind, name): (Kind, &[u8]),
        result: &Result<T, TryLockError>,
        waited: bool,
        had_waited: bool,
        took: Duration,
    ) {
        let outcome = match result {
            Ok(_) => {
                self.wait.observe(took);
                facade::waited(took);
                if had_waited {
                    self.handoffs.fetch_add(1, Relaxed);
                    facade::handoff();
                }
                ACQUIRED
            }
            Err(TryLockError::WouldBlock) if waited => TIMED_OUT,
            Err(TryLockError::WouldBlock) => REFUSED,
            Err(TryLockError::Error(e)) if e.kind() == ErrorKind::Interrupted => INTERRUPTED,
            Err(TryLockError::Error(_)) => FAILED,
        };
        self.by_kind[kind_index(kind)][outcome].fetch_add(1, Relaxed);
        let prefix = self.prefix_label.map(|sep| label_prefix(name, sep));
        facade::acquisition(kind.name(), OUTCOME_NAMES[outcome], prefix);
    }

    /// The renew thread sends a lease's renewal `lag` after it was due.
    pub(crate) fn renewal_lag(&self, lag: Duration) {
        self.renewal_lag.observe(lag);
        facade::renewal_lag(lag);
    }

    /// A lease begins.
    pub(crate) fn held(&self) {
        self.held_now.fetch_add(1, Relaxed);
        facade::held(1.0);
    }

    /// A lease held for `held` ends: released, or lost for `lost`.
    pub(crate) fn ended(&self, held: Duration, lost: Option<LossReason>) {
        self.held_now.fetch_sub(1, Relaxed);
        self.held.observe(held);
        facade::ended(held, lost);
        if let Some(why) = lost {
            self.lost[index(why)].fetch_add(1, Relaxed);
        }
    }

    /// A renewal round of the renew thread was confirmed (`true`) or not.
    pub(crate) fn renewal(&self, confirmed: bool) {
        let counter = if confirmed {
            &self.renewals
        } else {
            &self.renewal_failures
        };
        counter.fetch_add(1, Relaxed);
        facade::renewal(confirmed);
    }

    pub(crate) fn snapshot(&self) -> ClientStats {
        let lost = |r: LossReason| self.lost[index(r)].load(Relaxed);
        let lost_by = LostBy {
            another_owner: lost(LossReason::AnotherOwner),
            gone: lost(LossReason::Gone),
            nodes_down: lost(LossReason::NodesDown),
            validity_ran_out: lost(LossReason::ValidityRanOut),
            max_hold: lost(LossReason::MaxHold),
        };
        let outcomes = |k: usize| {
            let n = |o: usize| self.by_kind[k][o].load(Relaxed);
            Outcomes {
                acquired: n(ACQUIRED),
                refused: n(REFUSED),
                timed_out: n(TIMED_OUT),
                interrupted: n(INTERRUPTED),
                failed: n(FAILED),
            }
        };
        let by_kind = ByKind {
            mutex: outcomes(0),
            semaphore: outcomes(1),
            read: outcomes(2),
        };
        let total = by_kind.total();
        ClientStats {
            acquired: total.acquired,
            refused: total.refused,
            timed_out: total.timed_out,
            interrupted: total.interrupted,
            failed: total.failed,
            by_kind,
            handoffs: self.handoffs.load(Relaxed),
            lost: LossReason::ALL.iter().map(|&r| lost_by.get(r)).sum(),
            lost_by,
            renewals: self.renewals.load(Relaxed),
            renewal_failures: self.renewal_failures.load(Relaxed),
            held_now: self.held_now.load(Relaxed),
            waiting_now: self.waiting_now.load(Relaxed),
            wait_seconds: self.wait.snapshot(),
            held_seconds: self.held.snapshot(),
            renewal_lag_seconds: self.renewal_lag.snapshot(),
            connections: Vec::new(),
        }
    }
}

/// The outcomes of an acquisition, as `by_kind` counts them.
const ACQUIRED: usize = 0;
const REFUSED: usize = 1;
const TIMED_OUT: usize = 2;
const INTERRUPTED: usize = 3;
const FAILED: usize = 4;
const OUTCOME_NAMES: [&str; 5] = ["acquired", "refused", "timed_out", "interrupted", "failed"];

/// Where a kind of lock is counted in `by_kind`.
fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::Mutex => 0,
        Kind::Semaphore(_) => 1,
        Kind::Read => 2,
    }
}

/// `name` up to the first `separator`, or all of it (lossy UTF-8).
fn label_prefix(name: &[u8], separator: u8) -> String {
    let end = name
        .iter()
        .position(|&b| b == separator)
        .unwrap_or(name.len());
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// Where `reason` is counted.
fn index(reason: LossReason) -> usize {
    LossReason::ALL
        .iter()
        .position(|&r| r == reason)
        .unwrap_or(0)
}

/// An acquisition call counted in `waiting_now` while it lives.
pub(crate) struct Waiting<'a>(&'a Counters);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting_now.fetch_sub(1, Relaxed);
        facade::waiting(-1.0);
    }
}

/// The same figures for the `metrics` crate's facade (with the `metrics` feature; without it,
/// these do nothing and cost nothing). Names and labels:
///
/// - `redmutex_acquisitions_total{kind, outcome}`: `kind` is `mutex`, `semaphore` or `read`,
///   `outcome` one of `acquired`, `refused`, `timed_out`, `interrupted`, `failed`; with
///   `ClientBuilder::metrics_prefix_label`, also `prefix` (the name up to its separator);
/// - `redmutex_handoffs_total`: grants after a wait for a release;
/// - `redmutex_lost_total{reason}`: `reason` as [`LossReason::name`];
/// - `redmutex_renewals_total{result}`: `confirmed` or `failed`;
/// - `redmutex_held` and `redmutex_waiting`: gauges of leases held and calls waiting;
/// - `redmutex_acquire_wait_seconds`, `redmutex_held_seconds` and
///   `redmutex_renewal_lag_seconds`: histograms.
///
/// Gauges count what this process's clients add and take away, so several clients of one
/// process add up.
#[cfg(feature = "metrics")]
mod facade {
    use std::time::Duration;

    use crate::stats::LossReason;

    pub(super) fn acquisition(kind: &'static str, outcome: &'static str, prefix: Option<String>) {
        match prefix {
            None => metrics::counter!(
                "redmutex_acquisitions_total", "kind" => kind, "outcome" => outcome
            ),
            Some(prefix) => metrics::counter!(
                "redmutex_acquisitions_total",
                "kind" => kind, "outcome" => outcome, "prefix" => prefix
            ),
        }
        .increment(1);
    }

    pub(super) fn handoff() {
        metrics::counter!("redmutex_handoffs_total").increment(1);
    }

    pub(super) fn renewal_lag(lag: Duration) {
        metrics::histogram!("redmutex_renewal_lag_seconds").record(lag.as_secs_f64());
    }

    pub(super) fn waited(took: Duration) {
        metrics::histogram!("redmutex_acquire_wait_seconds").record(took.as_secs_f64());
    }

    pub(super) fn waiting(delta: f64) {
        metrics::gauge!("redmutex_waiting").increment(delta);
    }

    pub(super) fn held(delta: f64) {
        metrics::gauge!("redmutex_held").increment(delta);
    }

    pub(super) fn ended(held: Duration, lost: Option<LossReason>) {
        self::held(-1.0);
        metrics::histogram!("redmutex_held_seconds").record(held.as_secs_f64());
        if let Some(why) = lost {
            metrics::counter!("redmutex_lost_total", "reason" => why.name()).increment(1);
        }
    }

    pub(super) fn renewal(confirmed: bool) {
        let result = if confirmed { "confirmed" } else { "failed" };
        metrics::counter!("redmutex_renewals_total", "result" => result).increment(1);
    }
}

/// Without the `metrics` feature: nothing.
#[cfg(not(feature = "metrics"))]
mod facade {
    use std::time::Duration;

    use crate::stats::LossReason;

    pub(super) fn acquisition(_: &'static str, _: &'static str, _: Option<String>) {}
    pub(super) fn handoff() {}
    pub(super) fn renewal_lag(_: Duration) {}
    pub(super) fn waited(_: Duration) {}
    pub(super) fn waiting(_: f64) {}
    pub(super) fn held(_: f64) {}
    pub(super) fn ended(_: Duration, _: Option<LossReason>) {}
    pub(super) fn renewal(_: bool) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_lands_in_the_first_bucket_whose_bound_holds_it() {
        let c = Counters::default();
        c.held();
        c.ended(Duration::from_micros(100), None);
        c.held();
        c.ended(Duration::from_micros(101), Some(LossReason::Gone));
        c.held();
        c.ended(Duration::from_secs(61), Some(LossReason::MaxHold));
        let s = c.snapshot();
        let h = &s.held_seconds;
        assert_eq!(h.buckets.len(), HISTOGRAM_BOUNDS.len() + 1);
        assert_eq!(
            (h.buckets[0], h.buckets[1], h.buckets[BUCKETS - 1]),
            (1, 1, 1)
        );
        assert_eq!(h.count, 3);
        assert!((h.sum - 61.000201).abs() < 1e-9, "{}", h.sum);
        assert_eq!((s.lost, s.lost_by.gone, s.lost_by.max_hold), (2, 1, 1));
        assert_eq!(s.held_now, 0);
    }
}
