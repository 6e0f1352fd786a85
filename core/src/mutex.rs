//! `Mutex`: a lock name plus its options, and the acquire loop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::client::Client;
use crate::error::{Error, ErrorKind, NodeOutcome, TryLockError};
use crate::guard::MutexGuard;
use crate::keys::Keys;
use crate::options::MutexOptions;
use crate::quorum::{self, Tally};
use crate::scripts::{self, Call};

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
    pub(crate) client: Client,
    /// The name (`keys.lock`) and its companion keys, derived once.
    pub(crate) keys: Arc<Keys>,
    pub(crate) opts: MutexOptions,
}

impl Mutex {
    pub(crate) fn new(client: Client, name: Vec<u8>) -> Mutex {
        Mutex {
            client,
            keys: Arc::new(Keys::for_name(name)),
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

    /// Replication safety: each grant and renewal counts on a node only once `n` of its
    /// replicas acknowledged the write within `timeout` (`WAIT`); see
    /// [`MutexOptions::min_replicas`] for what it does and does not guarantee.
    pub fn min_replicas(mut self, n: u32, timeout: Duration) -> Self {
        self.opts.min_replicas = Some((n, timeout));
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
        &self.keys.lock
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
    /// [`ErrorKind::Auth`] at once, and so is a [`ErrorKind::Connection`] error for a server
    /// certificate that does not verify; [`ErrorKind::Connection`] (one node) or
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
        let call = Call::new(&scripts::STATUS, &[&plan.keys.lock, &plan.keys.fence], &[]);
        let answers = quorum::exchange(
            nodes,
            &vec![std::slice::from_ref(&call); nodes.len()],
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
}

impl std::fmt::Debug for Mutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &String::from_utf8_lossy(&self.keys.lock))
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

pub(crate) fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

pub(crate) fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        _ => Vec::new(),
    }
}
