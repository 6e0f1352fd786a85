//! The options of a lock, their bounds and defaults.

use std::time::Duration;

use crate::error::Error;

/// The longest first wait for a wake-up signal of a call (and its first after each
/// wake-up): waits that run out grow from it up to [`MutexOptions::wait_cap`].
pub const FIRST_WAIT: Duration = Duration::from_millis(250);

/// The shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest TTL accepted (a lease is never "no expiry").
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The longest lock name, in bytes.
pub const MAX_NAME_LEN: usize = 512;
/// The default lease.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The clock drift allowance for a lease of `ttl`: 1 % plus 2 ms, as in the Redlock text.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The per-node timeout a lock uses when none is configured: 2 % of the TTL, at least 50 ms,
/// at most 250 ms, and never more than a quarter of the TTL. (The Redlock text suggests
/// 5–50 ms for a 10 s TTL; below 50 ms a busy client machine mistakes its own scheduling
/// delays for dead nodes.)
pub fn default_node_timeout(ttl: Duration) -> Duration {
    (ttl / 50)
        .max(Duration::from_millis(50))
        .min(Duration::from_millis(250))
        .min(ttl / 4)
}

pub(crate) fn check_ttl(ttl: Duration) -> Result<(), Error> {
    within("the TTL", ttl, MIN_TTL, MAX_TTL)
}

/// Checks that the option `what` is in `lo..=hi`. Every lock call checks its options: the
/// message for one out of range is worded apart, off the path of the calls whose options are
/// fine.
fn within(what: &'static str, d: Duration, lo: Duration, hi: Duration) -> Result<(), Error> {
    if d < lo || d > hi {
        return Err(out_of_range(what, d, lo, hi));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn out_of_range(what: &str, d: Duration, lo: Duration, hi: Duration) -> Error {
    Error::invalid(format!(
        "{what} must be between {lo:?} and {hi:?}, got {d:?}"
    ))
}

/// Options of one lock. Every default is a finite lease: nothing here means "never expires".
///
/// ```
/// use redmutex::MutexOptions;
/// use std::time::Duration;
///
/// let opts = MutexOptions::default()
///     .with_ttl(Duration::from_secs(10))
///     .with_max_hold(Some(Duration::from_secs(600)));
/// assert!(opts.auto_renew);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MutexOptions {
    /// The lease: how long the lock survives its holder's silence (default 30 s, between
    /// 10 ms and 24 h).
    pub ttl: Duration,
    /// Whether the client's renew thread extends the lease every `ttl/3` (default true).
    pub auto_renew: bool,
    /// Renewal stops this long after the lock was taken; the lock then expires and the guard
    /// is lost (default: none).
    pub max_hold: Option<Duration>,
    /// Whether each grant increments the name's fence counter (default true). Turn off for
    /// names of unbounded cardinality: the counter is one key per name that never expires.
    /// Without it a `try_lock` also costs the server less: it sends plain commands instead of
    /// the acquire script (the counter must move on a grant only, which takes a script).
    pub fencing: bool,
    /// The per-node, per-request timeout. Default: the client's, else
    /// [`default_node_timeout`] of the TTL.
    pub node_timeout: Option<Duration>,
    /// The base of the randomized retry delay (uniform in ½..1½ of it; default 50 ms), used
    /// when no wake-up signal can be awaited and between renewal retries.
    pub retry_delay: Duration,
    /// The longest a waiter blocks for a wake-up signal before it tries again (default 2 s):
    /// the most a lost wake-up can cost. A call's first wait, and its first after each
    /// wake-up, is at most [`FIRST_WAIT`] (or this cap, if lower); each wait that runs out
    /// doubles the next, up to this cap. So a lock held for long costs each waiter one round
    /// every 2 s, and a wake-up lost at a release (its waiter died, or its own connection's wait
    /// ended at its deadline just as the signal came; one that the client's shared waiting
    /// connection took for an ended call, or that woke a call interrupted before its round, is
    /// passed on) costs up to 2 s in a long wait, 250 ms in a short one. A call
    /// with an interrupt check and no wake-up descriptor (see [`crate::wake_on`]) keeps every
    /// wait to the first one's length, so that its check runs as often as before.
    pub wait_cap: Duration,
    /// After a release that had waiters, newcomers must leave the lock to a waiter for this
    /// long (default 20 ms, at most the TTL), so a holder that re-locks at once cannot starve
    /// the waiters.
    /// Zero turns the hand-off off.
    pub handoff_window: Duration,
    /// Replication safety (default off): `Some((n, timeout))` makes every grant and every
    /// renewal wait (`WAIT n timeout`, pipelined right after the write on the same
    /// connection) until `n` replicas of that node acknowledged the write. A node whose write
    /// reached fewer replicas in time does not count: its grant is undone like any failed
    /// grant, and its renewal counts as not confirmed. `n` is at least 1; the timeout is
    /// between 1 ms and half the TTL, and is added to each round's deadline.
    ///
    /// What it guarantees: when the lock counts as held (or renewed), its write had reached
    /// `n` replicas on each node of the quorum, so a failover that promotes one of those
    /// replicas keeps the lock. What it does not: `WAIT` is not consensus. A failover to a
    /// replica that did not get the write, or a write lost by asynchronous replication
    /// afterwards, can still lose the lock; a fence write-back to lagging nodes is not
    /// waited for. It costs a round trip plus the replicas' lag on every grant and renewal.
    pub min_replicas: Option<(u32, Duration)>,
}

impl Default for MutexOptions {
    fn default() -> Self {
        MutexOptions {
            ttl: DEFAULT_TTL,
            auto_renew: true,
            max_hold: None,
            fencing: true,
            node_timeout: None,
            retry_delay: Duration::from_millis(50),
            wait_cap: Duration::from_secs(2),
            handoff_window: Duration::from_millis(20),
            min_replicas: None,
        }
    }
}

impl MutexOptions {
    /// Sets [`ttl`](MutexOptions::ttl).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Sets [`auto_renew`](MutexOptions::auto_renew).
    pub fn with_auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }
    /// Sets [`max_hold`](MutexOptions::max_hold).
    pub fn with_max_hold(mut self, max_hold: Option<Duration>) -> Self {
        self.max_hold = max_hold;
        self
    }
    /// Sets [`fencing`](MutexOptions::fencing).
    pub fn with_fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }
    /// Sets [`node_timeout`](MutexOptions::node_timeout).
    pub fn with_node_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.node_timeout = timeout;
        self
    }
    /// Sets [`retry_delay`](MutexOptions::retry_delay).
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }
    /// Sets [`wait_cap`](MutexOptions::wait_cap).
    pub fn with_wait_cap(mut self, cap: Duration) -> Self {
        self.wait_cap = cap;
        self
    }
    /// Sets [`handoff_window`](MutexOptions::handoff_window).
    pub fn with_handoff_window(mut self, window: Duration) -> Self {
        self.handoff_window = window;
        self
    }
    /// Sets [`min_replicas`](MutexOptions::min_replicas).
    pub fn with_min_replicas(mut self, min_replicas: Option<(u32, Duration)>) -> Self {
        self.min_replicas = min_replicas;
        self
    }

    /// The time a round may spend in `WAIT`, on top of the node timeout.
    pub(crate) fn replica_wait(&self) -> Duration {
        self.min_replicas.map_or(Duration::ZERO, |(_, t)| t)
    }

    /// Checks every option; what `lock` does before it sends anything.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming the first option out of range.
    pub fn validate(&self) -> Result<(), Error> {
        check_ttl(self.ttl)?;
        let ms = Duration::from_millis;
        if let Some(h) = self.max_hold {
            within("max_hold", h, MIN_TTL, Duration::from_secs(366 * 24 * 3600))?;
        }
        if let Some(t) = self.node_timeout {
            within("node_timeout", t, ms(1), self.ttl)?;
        }
        within(
            "retry_delay",
            self.retry_delay,
            ms(1),
            Duration::from_secs(60),
        )?;
        within("wait_cap", self.wait_cap, ms(1), Duration::from_secs(60))?;
        // Not bounded by the TTL: the default window must be valid for the shortest TTL too;
        // a release uses at most the TTL of it.
        within(
            "handoff_window",
            self.handoff_window,
            Duration::ZERO,
            Duration::from_secs(60),
        )?;
        if let Some((n, timeout)) = self.min_replicas {
            if n == 0 {
                return Err(Error::invalid(
                    "min_replicas needs at least 1 replica (use None to turn it off)",
                ));
            }
            within("the min_replicas timeout", timeout, ms(1), self.ttl / 2)?;
        }
        Ok(())
    }
}

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1024;
