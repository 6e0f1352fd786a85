//! A client's figures as they are counted: atomics only, so that counting costs a lock call
//! a few uncontended increments and no lock or allocation. [`Counters::snapshot`] copies
//! them into the public [`ClientStats`]. With the `metrics` feature, each figure also goes to
//! the `metrics` facade as it is counted (see [`facade`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::error::{ErrorKind, TryLockError};
use crate::stats::{ClientStats, HISTOGRAM_BOUNDS, Histogram, LossReason, LostBy};

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
    acquired: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
    interrupted: AtomicU64,
    failed: AtomicU64,
    lost: [AtomicU64; LossReason::ALL.len()],
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    held_now: AtomicU64,
    waiting_now: AtomicU64,
    wait: Buckets,
    held: Buckets,
}

impl Counters {
    /// An acquisition call that may wait begins: it counts in `waiting_now` until its
    /// [`Waiting`] is dropped.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.waiting_now.fetch_add(1, Relaxed);
        facade::waiting(1.0);
        Waiting(self)
    }

    /// How an acquisition call that began `took` ago ended; `waited` says whether it could
    /// wait (a refusal is then a wait that ran out).
    pub(crate) fn acquisition<T>(
        &self,
        kind: &'static str,
        result: &Result<T, TryLockError>,
        waited: bool,
        took: Duration,
    ) {
        let (counter, outcome) = match result {
            Ok(_) => {
                self.wait.observe(took);
                facade::waited(took);
                (&self.acquired, "acquired")
            }
            Err(TryLockError::WouldBlock) if waited => (&self.timed_out, "timed_out"),
            Err(TryLockError::WouldBlock) => (&self.refused, "refused"),
            Err(TryLockError::Error(e)) if e.kind() == ErrorKind::Interrupted => {
                (&self.interrupted, "interrupted")
            }
            Err(TryLockError::Error(_)) => (&self.failed, "failed"),
        };
        counter.fetch_add(1, Relaxed);
        facade::acquisition(kind, outcome);
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
        ClientStats {
            acquired: self.acquired.load(Relaxed),
            refused: self.refused.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
            interrupted: self.interrupted.load(Relaxed),
            failed: self.failed.load(Relaxed),
            lost: LossReason::ALL.iter().map(|&r| lost_by.get(r)).sum(),
            lost_by,
            renewals: self.renewals.load(Relaxed),
            renewal_failures: self.renewal_failures.load(Relaxed),
            held_now: self.held_now.load(Relaxed),
            waiting_now: self.waiting_now.load(Relaxed),
            wait_seconds: self.wait.snapshot(),
            held_seconds: self.held.snapshot(),
        }
    }
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
///   `outcome` one of `acquired`, `refused`, `timed_out`, `interrupted`, `failed`;
/// - `redmutex_lost_total{reason}`: `reason` as [`LossReason::name`];
/// - `redmutex_renewals_total{result}`: `confirmed` or `failed`;
/// - `redmutex_held` and `redmutex_waiting`: gauges of leases held and calls waiting;
/// - `redmutex_acquire_wait_seconds` and `redmutex_held_seconds`: histograms.
///
/// Gauges count what this process's clients add and take away, so several clients of one
/// process add up.
#[cfg(feature = "metrics")]
mod facade {
    use std::time::Duration;

    use crate::stats::LossReason;

    pub(super) fn acquisition(kind: &'static str, outcome: &'static str) {
        metrics::counter!("redmutex_acquisitions_total", "kind" => kind, "outcome" => outcome)
            .increment(1);
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

    pub(super) fn acquisition(_: &'static str, _: &'static str) {}
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
