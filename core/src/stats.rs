//! What a client did, counted: [`ClientStats`], the snapshot [`Client::stats`] returns.
//!
//! [`Client::stats`]: crate::Client::stats

use std::fmt;
use std::time::Duration;

/// The upper bounds of a [`Histogram`]'s buckets, in seconds: 100 µs to 60 s, about three
/// buckets a decade. A last bucket past them counts what took longer.
pub const HISTOGRAM_BOUNDS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0, 30.0, 60.0,
];

/// Durations in fixed buckets ([`HISTOGRAM_BOUNDS`]), as a metrics system keeps them.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Histogram {
    /// How many durations fell in each bucket: `buckets[i]` counts those above
    /// `HISTOGRAM_BOUNDS[i - 1]` (0 for the first) and at most `HISTOGRAM_BOUNDS[i]`; the last
    /// one (`buckets[HISTOGRAM_BOUNDS.len()]`) those above 60 s. Not cumulative.
    pub buckets: Vec<u64>,
    /// How many durations were recorded.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum: f64,
}

impl Histogram {
    /// The bucket upper bounds, in seconds (the same for every histogram).
    pub fn bounds(&self) -> &'static [f64] {
        &HISTOGRAM_BOUNDS
    }

    /// The mean duration, if any was recorded.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_secs_f64(self.sum / self.count as f64))
    }
}

/// Why a held lock was lost, as [`ClientStats::lost_by`] counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// Another owner holds it: a renewal (or the release) was refused with someone else's
    /// token in the key.
    AnotherOwner,
    /// It was gone from Redis when renewed or released: expired, deleted or evicted.
    Gone,
    /// Too many of its nodes were down to renew it before its validity ran out.
    NodesDown,
    /// Its validity ran out before a renewal was confirmed: renewal off, or the process or its
    /// renew thread held up, or renewals unanswered.
    ValidityRanOut,
    /// Its `max_hold` ran out (renewal stops there by design).
    MaxHold,
}

impl LossReason {
    /// Every reason, in the order of [`LostBy`]'s fields.
    pub const ALL: [LossReason; 5] = [
        LossReason::AnotherOwner,
        LossReason::Gone,
        LossReason::NodesDown,
        LossReason::ValidityRanOut,
        LossReason::MaxHold,
    ];

    /// A short name for labels and logs: `another_owner`, `gone`, `nodes_down`,
    /// `validity_ran_out`, `max_hold`.
    pub fn name(self) -> &'static str {
        match self {
            LossReason::AnotherOwner => "another_owner",
            LossReason::Gone => "gone",
            LossReason::NodesDown => "nodes_down",
            LossReason::ValidityRanOut => "validity_ran_out",
            LossReason::MaxHold => "max_hold",
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Losses counted by reason; they add up to [`ClientStats::lost`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostBy {
    /// [`LossReason::AnotherOwner`].
    pub another_owner: u64,
    /// [`LossReason::Gone`].
    pub gone: u64,
    /// [`LossReason::NodesDown`].
    pub nodes_down: u64,
    /// [`LossReason::ValidityRanOut`].
    pub validity_ran_out: u64,
    /// [`LossReason::MaxHold`].
    pub max_hold: u64,
}

impl LostBy {
    /// The count of one reason.
    pub fn get(&self, reason: LossReason) -> u64 {
        match reason {
            LossReason::AnotherOwner => self.another_owner,
            LossReason::Gone => self.gone,
            LossReason::NodesDown => self.nodes_down,
            LossReason::ValidityRanOut => self.validity_ran_out,
            LossReason::MaxHold => self.max_hold,
        }
    }
}

/// How one kind of lock's acquisition calls ended: each call in exactly one field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outcomes {
    /// Granted.
    pub acquired: u64,
    /// Refused at once (`WouldBlock` from a call that did not wait).
    pub refused: u64,
    /// Their wait ran out (`WouldBlock` from a call that waited).
    pub timed_out: u64,
    /// Ended by their interrupt check or wake-up descriptor.
    pub interrupted: u64,
    /// Failed with an error.
    pub failed: u64,
}

/// Acquisition calls by kind of lock ([`ClientStats::by_kind`]); they add up to the totals
/// of [`ClientStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ByKind {
    /// Mutexes, and the write side of read-write locks (one kind of hold).
    pub mutex: Outcomes,
    /// Semaphore permits.
    pub semaphore: Outcomes,
    /// Read holds of read-write locks.
    pub read: Outcomes,
}

impl ByKind {
    /// The three kinds added up.
    pub fn total(&self) -> Outcomes {
        let all = [self.mutex, self.semaphore, self.read];
        let sum = |f: fn(&Outcomes) -> u64| all.iter().map(f).sum();
        Outcomes {
            acquired: sum(|o| o.acquired),
            refused: sum(|o| o.refused),
            timed_out: sum(|o| o.timed_out),
            interrupted: sum(|o| o.interrupted),
            failed: sum(|o| o.failed),
        }
    }
}

/// What one client's locks (every kind: mutexes, semaphores, read-write locks) did since the
/// client was opened, and what they hold and wait for now: [`Client::stats`].
///
/// Counted by the library as it goes, with atomics (no lock, no allocation per call); a
/// snapshot is a copy of them. An acquisition call ends in exactly one of `acquired`,
/// `refused`, `timed_out`, `interrupted` and `failed`.
///
/// [`Client::stats`]: crate::Client::stats
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Acquisitions granted.
    pub acquired: u64,
    /// Acquisitions refused at once ([`TryLockError::WouldBlock`] from a call that did not
    /// wait: `try_lock`, `try_acquire`, …).
    ///
    /// [`TryLockError::WouldBlock`]: crate::TryLockError::WouldBlock
    pub refused: u64,
    /// Acquisitions whose wait ran out (`WouldBlock` from a call that waited).
    pub timed_out: u64,
    /// Acquisitions ended by their interrupt check or wake-up descriptor
    /// ([`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted)).
    pub interrupted: u64,
    /// Acquisitions that failed with an error: no quorum, no connection, a bad argument the
    /// server refused, …
    pub failed: u64,
    /// The same acquisitions, by kind of lock.
    pub by_kind: ByKind,
    /// Acquisitions granted after waiting for a release (hand-offs received): woken by a
    /// release, or finding the lock free when a wait ended.
    pub handoffs: u64,
    /// Held locks lost (not released by their owner first), whatever the reason.
    pub lost: u64,
    /// The same, by reason.
    pub lost_by: LostBy,
    /// Renewals the renew thread got confirmed.
    pub renewals: u64,
    /// Renewal rounds that were not confirmed (tried again while the lock was still valid,
    /// or the lock was lost).
    pub renewal_failures: u64,
    /// Leases held now: granted and neither released nor lost.
    pub held_now: u64,
    /// Acquisition calls that may wait and have not ended yet.
    pub waiting_now: u64,
    /// For every granted acquisition, the time from the call to the grant.
    pub wait_seconds: Histogram,
    /// For every lease that ended (released or lost), how long it was held.
    pub held_seconds: Histogram,
    /// For every renewal the renew thread sent, how late it was against its schedule: the
    /// renew thread falling behind (a busy process, too many leases per client) is the
    /// first sign of trouble, long before a lease runs out.
    pub renewal_lag_seconds: Histogram,
    /// Connections open now to each node, in the order of
    /// [`Client::node_names`](crate::Client::node_names) (a cluster's counts every master;
    /// the pool's idle ones, those in use and the shared waiting one).
    pub connections: Vec<u64>,
}
