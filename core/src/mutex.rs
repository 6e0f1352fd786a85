//! `Mutex`: a lock name plus its options, and the acquire loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::client::Client;
use crate::error::{Error, ErrorKind, NodeOutcome, TryLockError};
use crate::guard::{GuardShared, MutexGuard, millis, release_call};
use crate::keys::Keys;
use crate::node;
use crate::quorum::{self, Tally};
use crate::scripts::{self, Call};
use crate::token;

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

/// The per-node timeout a lock uses when none is configured: 2 % of the TTL, at least 20 ms,
/// at most 250 ms, and never more than a quarter of the TTL.
pub fn default_node_timeout(ttl: Duration) -> Duration {
    (ttl / 50)
        .max(Duration::from_millis(20))
        .min(Duration::from_millis(250))
        .min(ttl / 4)
}

pub(crate) fn check_ttl(ttl: Duration) -> Result<(), Error> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "the TTL must be between {MIN_TTL:?} and {MAX_TTL:?}, got {ttl:?}"
        )));
    }
    Ok(())
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
    pub fencing: bool,
    /// The per-node, per-request timeout. Default: the client's, else
    /// [`default_node_timeout`] of the TTL.
    pub node_timeout: Option<Duration>,
    /// The base of the randomized retry delay (uniform in ½..1½ of it; default 50 ms), used
    /// when no wake-up signal can be awaited and between renewal retries.
    pub retry_delay: Duration,
    /// The longest a waiter blocks for a wake-up signal before it tries again (default 250 ms):
    /// the most a lost wake-up can cost.
    pub wait_cap: Duration,
    /// After a release that had waiters, newcomers must leave the lock to a waiter for this
    /// long (default 20 ms), so a holder that re-locks at once cannot starve the waiters.
    /// Zero turns the hand-off off.
    pub handoff_window: Duration,
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
            wait_cap: Duration::from_millis(250),
            handoff_window: Duration::from_millis(20),
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

    /// Checks every option; what `lock` does before it sends anything.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] naming the first option out of range.
    pub fn validate(&self) -> Result<(), Error> {
        check_ttl(self.ttl)?;
        let ms = Duration::from_millis;
        let within = |what: &str, d: Duration, lo: Duration, hi: Duration| {
            if d < lo || d > hi {
                Err(Error::invalid(format!(
                    "{what} must be between {lo:?} and {hi:?}, got {d:?}"
                )))
            } else {
                Ok(())
            }
        };
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
        within(
            "handoff_window",
            self.handoff_window,
            Duration::ZERO,
            self.ttl,
        )?;
        Ok(())
    }
}

/// What `Mutex::status` finds in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The holder's value (`owner-label:random-hex` for redmutex holders), when a quorum of
    /// nodes agree on one; `None` when the lock is free.
    pub holder: Option<Vec<u8>>,
    /// The holder's remaining lease (the smallest among the agreeing nodes), if it has one.
    pub ttl: Option<Duration>,
    /// The last fence number granted for this name (the largest among the nodes).
    pub fence: u64,
}

/// A distributed lock: a name (its Redis key) plus its options.
///
/// Made by [`Client::mutex`]; cheap to create and clone, holds no connection. Taking it yields
/// a [`MutexGuard`], which releases the lock when dropped.
///
/// # Examples
///
/// ```no_run
/// use redmutex::{Client, TryLockError};
/// use std::time::Duration;
///
/// let client = Client::open("redis://127.0.0.1:6379")?;
/// let mutex = client.mutex("invoice:nightly:lock").ttl(Duration::from_secs(30));
/// match mutex.try_lock() {
///     Ok(guard) => println!("sending invoices with fence {}", guard.fence()),
///     Err(TryLockError::WouldBlock) => println!("another server sends them"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
///
/// # Differences from `std::sync::Mutex`
///
/// - The lock is a lease: without renewal it ends after its TTL even though the guard still
///   exists. Check [`MutexGuard::is_held`] before acting, and pass [`MutexGuard::fence`] to
///   the resource you protect.
/// - No poisoning, no data inside: the lock protects something outside this process.
/// - Every call may fail: Redis can be unreachable.
#[derive(Clone)]
pub struct Mutex {
    client: Client,
    name: Vec<u8>,
    opts: MutexOptions,
}

/// One acquisition attempt's result.
enum Attempt {
    Held(MutexGuard),
    /// Someone else holds it (or a split vote): wait, preferably on one of these nodes.
    Busy {
        hint: Option<Duration>,
        wake_from: Vec<usize>,
    },
    /// Fewer than a quorum of nodes answered.
    Unreachable(Error),
}

/// What one acquisition call settles once, before its first attempt.
struct Plan {
    keys: Keys,
    node_timeout: Duration,
    label: String,
}

impl Mutex {
    pub(crate) fn new(client: Client, name: Vec<u8>) -> Mutex {
        Mutex {
            client,
            name,
            opts: MutexOptions::default(),
        }
    }

    /// Sets the lease (default 30 s; 10 ms to 24 h).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.opts.ttl = ttl;
        self
    }

    /// Whether the client's renew thread keeps the lock while the guard lives (default true).
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.opts.auto_renew = on;
        self
    }

    /// Stops renewal this long after the lock was taken (default: never stops).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.opts.max_hold = Some(max_hold);
        self
    }

    /// Whether grants carry fence numbers (default true).
    pub fn fencing(mut self, on: bool) -> Self {
        self.opts.fencing = on;
        self
    }

    /// The per-node, per-request timeout (default derived from the TTL).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.opts.node_timeout = Some(timeout);
        self
    }

    /// Replaces all options at once.
    pub fn options(mut self, opts: MutexOptions) -> Self {
        self.opts = opts;
        self
    }

    /// The current options.
    pub fn current_options(&self) -> &MutexOptions {
        &self.opts
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Blocks until the lock is held.
    ///
    /// Waiters do not poll: a release wakes one waiter within about a round trip; the wait
    /// for a wake-up is bounded by the holder's remaining TTL and the wait cap.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a bad name or option (nothing is sent);
    /// [`ErrorKind::Auth`] at once; [`ErrorKind::Connection`] (one node) or
    /// [`ErrorKind::NoQuorum`] (several) when no quorum of nodes could be reached for the
    /// client's connect timeout.
    pub fn lock(&self) -> Result<MutexGuard, Error> {
        self.acquire(None, None).map_err(Error::from)
    }

    /// One attempt, no waiting.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when someone else holds the lock; otherwise as
    /// [`lock`](Mutex::lock).
    pub fn try_lock(&self) -> Result<MutexGuard, TryLockError> {
        self.acquire(Some(Instant::now()), None)
    }

    /// Waits at most `timeout` for the lock.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when the wait ran out; otherwise as [`lock`](Mutex::lock).
    pub fn try_lock_for(&self, timeout: Duration) -> Result<MutexGuard, TryLockError> {
        // A wait too long to represent is a wait without end.
        self.acquire(Instant::now().checked_add(timeout), None)
    }

    /// Waits until `deadline` at most for the lock.
    ///
    /// # Errors
    ///
    /// [`TryLockError::WouldBlock`] when the wait ran out; otherwise as [`lock`](Mutex::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<MutexGuard, TryLockError> {
        self.acquire(Some(deadline), None)
    }

    /// Waits until `deadline` (or forever with `None`), calling `interrupted` after every
    /// wake-up — at least every [`wait_cap`](MutexOptions::wait_cap) — and giving up with
    /// [`ErrorKind::Interrupted`] when it returns true. For bindings that must honour Ctrl-C.
    ///
    /// # Errors
    ///
    /// As [`try_lock_until`](Mutex::try_lock_until), plus [`ErrorKind::Interrupted`].
    pub fn lock_interruptible(
        &self,
        deadline: Option<Instant>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Result<MutexGuard, TryLockError> {
        self.acquire(deadline, Some(interrupted))
    }

    /// Asks Redis whether anyone holds this name (redmutex or any client using `SET NX`).
    ///
    /// # Errors
    ///
    /// As [`status`](Mutex::status).
    pub fn is_locked(&self) -> Result<bool, Error> {
        Ok(self.status()?.holder.is_some())
    }

    /// Who holds the lock, for how long, and the last fence number.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a bad name; [`ErrorKind::Connection`] /
    /// [`ErrorKind::NoQuorum`] when fewer than a quorum of nodes answered.
    pub fn status(&self) -> Result<LockStatus, Error> {
        let plan = self.plan()?;
        let nodes = &self.client.inner.nodes;
        let call = Call::new(
            &scripts::STATUS,
            vec![plan.keys.lock.clone(), plan.keys.fence.clone()],
            vec![],
        );
        let answers = quorum::exchange(
            nodes,
            &vec![vec![call]; nodes.len()],
            Instant::now() + plan.node_timeout,
            None,
        );
        let mut tally = Tally::default();
        let mut seen: Vec<(Vec<u8>, i64)> = Vec::new();
        let mut fence = 0u64;
        for (node, answer) in nodes.iter().zip(answers) {
            match answer.map(|mut v| v.pop()) {
                Ok(Some(Ok(Value::Array(items)))) if items.len() == 3 => {
                    let holder = bytes(&items[0]);
                    let pttl = int(&items[1]);
                    fence = fence.max(int(&items[2]).max(0) as u64);
                    if !holder.is_empty() {
                        seen.push((holder, pttl));
                    }
                    tally.push(node, NodeOutcome::Ok);
                }
                Ok(Some(Err(e))) | Err(e) => tally.fail(node, e),
                other => tally.push(
                    node,
                    NodeOutcome::Error(format!("unexpected reply {other:?}")),
                ),
            }
        }
        let quorum = self.client.inner.quorum;
        if tally.yes < quorum {
            return Err(Error::from_report(
                "not enough nodes answered",
                ErrorKind::NoQuorum,
                tally.reports,
                tally.source,
            ));
        }
        let mut holder = None;
        let mut ttl = None;
        for (value, _) in &seen {
            let agreeing: Vec<i64> = seen
                .iter()
                .filter(|(v, _)| v == value)
                .map(|(_, p)| *p)
                .collect();
            if agreeing.len() >= quorum {
                holder = Some(value.clone());
                ttl = agreeing
                    .iter()
                    .filter(|p| **p >= 0)
                    .min()
                    .map(|p| Duration::from_millis(*p as u64));
                break;
            }
        }
        Ok(LockStatus { holder, ttl, fence })
    }

    fn plan(&self) -> Result<Plan, Error> {
        if self.name.is_empty() || self.name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "a lock name must be 1 to {MAX_NAME_LEN} bytes, got {}",
                self.name.len()
            )));
        }
        self.opts.validate()?;
        let inner = &self.client.inner;
        let node_timeout = self
            .opts
            .node_timeout
            .or(inner.node_timeout)
            .unwrap_or_else(|| default_node_timeout(self.opts.ttl));
        Ok(Plan {
            keys: Keys::new(&self.name),
            node_timeout,
            label: inner.label(),
        })
    }

    fn acquire(
        &self,
        deadline: Option<Instant>,
        mut interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<MutexGuard, TryLockError> {
        let plan = self.plan()?;
        let mut waited = false;
        let mut unreachable_since: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let will_wait = deadline.is_none_or(|d| d > started);
            match self.attempt(&plan, waited, will_wait)? {
                Attempt::Held(guard) => return Ok(guard),
                Attempt::Busy { hint, wake_from } => {
                    unreachable_since = None;
                    let now = Instant::now();
                    let left = deadline.map(|d| d.saturating_duration_since(now));
                    if left == Some(Duration::ZERO) {
                        return Err(TryLockError::WouldBlock);
                    }
                    let block = [hint, Some(self.opts.wait_cap), left]
                        .into_iter()
                        .flatten()
                        .min()
                        .unwrap_or(self.opts.wait_cap);
                    self.wait_for_release(&plan, &wake_from, block);
                    waited = true;
                }
                Attempt::Unreachable(err) => {
                    if err.kind() == ErrorKind::Auth {
                        return Err(err.into());
                    }
                    // Ride over a short outage (a restart, a failover) for up to the connect
                    // timeout, then report it rather than block forever on a dead Redis.
                    let since = *unreachable_since.get_or_insert(started);
                    let give_up = since + self.client.inner.connect_timeout;
                    let give_up = deadline.map_or(give_up, |d| d.min(give_up));
                    let pause = token::jitter(self.opts.retry_delay);
                    let now = Instant::now();
                    if now + pause > give_up {
                        return Err(err.into());
                    }
                    std::thread::sleep(pause);
                }
            }
            if let Some(check) = interrupted.as_mut()
                && check()
            {
                return Err(Error::new(ErrorKind::Interrupted, "the wait was interrupted").into());
            }
        }
    }

    /// One Redlock round: ask every node at once, count the grants, check the validity.
    fn attempt(&self, plan: &Plan, waited: bool, will_wait: bool) -> Result<Attempt, Error> {
        let inner = &self.client.inner;
        let nodes = &inner.nodes;
        let n = nodes.len();
        let opts = &self.opts;
        let keys = &plan.keys;
        let token = token::new_token(&plan.label)?;
        let announce = if will_wait {
            opts.wait_cap + plan.node_timeout + Duration::from_millis(10)
        } else {
            Duration::ZERO
        };
        let acquire = Call::new(
            &scripts::ACQUIRE,
            vec![
                keys.lock.clone(),
                keys.fence.clone(),
                keys.waiters.clone(),
                keys.handoff.clone(),
            ],
            vec![
                token.clone(),
                millis(self.grant_ttl()),
                if opts.fencing {
                    b"1".to_vec()
                } else {
                    b"0".to_vec()
                },
                if waited { b"1".to_vec() } else { b"0".to_vec() },
                millis(announce),
            ],
        );
        let undo = release_call(keys, &token, opts, false);

        let t0 = Instant::now();
        let answers = quorum::exchange(
            nodes,
            &vec![vec![acquire]; n],
            t0 + plan.node_timeout,
            Some(&undo),
        );
        let mut tally = Tally::default();
        let mut granted: Vec<(usize, u64)> = Vec::new();
        let mut hint: Option<Duration> = None;
        let mut wake_from = Vec::new();
        let mut failed_midway = Vec::new();
        for (i, (node, answer)) in nodes.iter().zip(answers).enumerate() {
            match answer.map(|mut v| v.pop()) {
                Ok(Some(Ok(Value::Array(items))))
                    if int(items.first().unwrap_or(&Value::Nil)) == 1 =>
                {
                    granted.push((i, int(items.get(1).unwrap_or(&Value::Nil)).max(0) as u64));
                    tally.push(node, NodeOutcome::Ok);
                }
                Ok(Some(Ok(Value::Array(items)))) if items.len() == 3 => {
                    let pttl = int(&items[1]);
                    if pttl >= 0 {
                        let d = Duration::from_millis(pttl as u64);
                        hint = Some(hint.map_or(d, |h| h.min(d)));
                    } else if pttl == -2 {
                        hint = Some(Duration::ZERO);
                    }
                    wake_from.push(i);
                    tally.push(
                        node,
                        NodeOutcome::Taken {
                            holder: bytes(&items[2]),
                            pttl_ms: pttl,
                        },
                    );
                }
                // A script that failed midway may have stored our token before it failed.
                Ok(Some(Err(e))) => {
                    failed_midway.push(i);
                    tally.fail(node, e)
                }
                Err(e) => tally.fail(node, e),
                other => tally.push(
                    node,
                    NodeOutcome::Error(format!("unexpected reply {other:?}")),
                ),
            }
        }

        if granted.len() >= inner.quorum
            && let Some(fence) = self.settle_fence(plan, &granted)
        {
            let ttl = self.grant_ttl();
            let valid_until = t0 + ttl.saturating_sub(drift(ttl));
            if Instant::now() < valid_until {
                let shared = Arc::new(GuardShared::new(
                    Arc::clone(inner),
                    keys.clone(),
                    token,
                    fence,
                    opts.clone(),
                    plan.node_timeout,
                    t0,
                    valid_until,
                ));
                let next = shared.next_check(t0);
                inner.renewer.schedule(next, &shared);
                return Ok(Attempt::Held(MutexGuard { shared }));
            }
        }

        // Not held: undo every grant, and on nodes whose script failed midway. Nodes that did
        // not answer in time already have the undo queued behind our request; nodes that said
        // "taken" never stored our token.
        if !granted.is_empty() || !failed_midway.is_empty() {
            let mut calls = vec![Vec::new(); n];
            for i in granted.iter().map(|(i, _)| *i).chain(failed_midway) {
                calls[i] = vec![undo.clone()];
            }
            quorum::exchange(nodes, &calls, Instant::now() + plan.node_timeout, None);
        }
        let answered = tally.yes + tally.refused;
        if answered >= inner.quorum {
            // A split vote or a late grant: nobody may hold it right now, so do not wait for
            // the holder's whole TTL.
            if wake_from.is_empty() || granted.len() >= inner.quorum {
                hint = Some(Duration::ZERO);
            }
            Ok(Attempt::Busy { hint, wake_from })
        } else {
            Ok(Attempt::Unreachable(Error::from_report(
                "fewer than a quorum of nodes answered",
                ErrorKind::NoQuorum,
                tally.reports,
                tally.source,
            )))
        }
    }

    /// The lease of a grant: the TTL, shortened so it ends with `max_hold`.
    fn grant_ttl(&self) -> Duration {
        match self.opts.max_hold {
            Some(h) => self.opts.ttl.min(h.max(MIN_TTL)),
            None => self.opts.ttl,
        }
    }

    /// The fence of a grant, made monotonic across different quorums: the largest counter
    /// among the granting nodes, written back to those that returned less, so that any later
    /// quorum overlaps a node whose counter is already at least this fence. `None` when the
    /// write-back did not reach a quorum.
    fn settle_fence(&self, plan: &Plan, granted: &[(usize, u64)]) -> Option<u64> {
        if !self.opts.fencing {
            return Some(0);
        }
        let max = granted.iter().map(|(_, f)| *f).max().unwrap_or(0);
        let behind: Vec<usize> = granted
            .iter()
            .filter(|(_, f)| *f < max)
            .map(|(i, _)| *i)
            .collect();
        if behind.is_empty() {
            return Some(max);
        }
        let nodes = &self.client.inner.nodes;
        let mut calls = vec![Vec::new(); nodes.len()];
        let raise = Call::new(
            &scripts::FENCE_MAX,
            vec![plan.keys.fence.clone()],
            vec![max.to_string().into_bytes()],
        );
        for i in &behind {
            calls[*i] = vec![raise.clone()];
        }
        let answers = quorum::exchange(nodes, &calls, Instant::now() + plan.node_timeout, None);
        let raised = behind
            .iter()
            .filter(|i| matches!(&answers[**i], Ok(v) if matches!(v.first(), Some(Ok(_)))))
            .count();
        let at_max = granted.len() - behind.len() + raised;
        (at_max >= self.client.inner.quorum).then_some(max)
    }

    /// Blocks until a release signal, or `block` passes. Falls back to a randomized sleep
    /// when no node can be waited on.
    fn wait_for_release(&self, plan: &Plan, wake_from: &[usize], block: Duration) {
        if block.is_zero() {
            return;
        }
        let nodes = &self.client.inner.nodes;
        let i = if wake_from.is_empty() {
            token::pick(nodes.len())
        } else {
            wake_from[token::pick(wake_from.len())]
        };
        let node = &nodes[i];
        let started = Instant::now();
        let conn = node
            .take()
            .or_else(|| node.connect(started + plan.node_timeout).ok());
        if let Some(mut conn) = conn {
            // Redis checks blocking timeouts on its cron tick (every 100 ms at the default
            // hz 10), so a BLPOP may return up to a tick late. The wait must end on time (a
            // crashed holder's key expires exactly then), so our own read deadline ends it,
            // and a connection whose BLPOP is still pending is dropped, never reused. Long
            // waits ask the server for a tick less, so that they usually end cleanly.
            let tick = Duration::from_millis(100);
            let server_block = if block > tick + tick / 2 {
                block - tick
            } else {
                block
            };
            // BLPOP takes seconds with millisecond precision; 0 would mean "forever".
            let secs = format!("{:.3}", server_block.as_secs_f64().max(0.001));
            let packed = redis::cmd("BLPOP")
                .arg(plan.keys.wake.as_slice())
                .arg(secs)
                .get_packed_command();
            let waited = node::set_timeouts(&conn, started + block + Duration::from_millis(2))
                .and_then(|()| conn.send_packed_command(&packed))
                .and_then(|()| conn.recv_response());
            match waited {
                Ok(_) => {
                    node.put(conn);
                    return;
                }
                Err(e) if e.is_timeout() => return,
                Err(_) => {}
            }
        }
        let left = block.saturating_sub(started.elapsed());
        std::thread::sleep(token::jitter(self.opts.retry_delay).min(left));
    }
}

impl std::fmt::Debug for Mutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        _ => Vec::new(),
    }
}
