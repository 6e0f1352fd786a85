//! `MutexGuard`: proof of ownership, and its local held/lost state.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::client::Inner;
use crate::error::{Error, ErrorKind, NodeOutcome, NodeReport};
use crate::keys::Keys;
use crate::options::{MIN_TTL, MutexOptions, check_ttl, drift};
use crate::quorum::{self, NodeAnswer, Tally};
use crate::scripts::{self, Call, Decimal};
use crate::sync::{Condvar, Mutex};
use crate::token;

type Callback = Box<dyn FnOnce() + Send + 'static>;

/// Everything a guard owns, shared with the renew thread (which holds only a weak reference).
pub(crate) struct GuardShared {
    pub(crate) client: Arc<Inner>,
    pub(crate) keys: Arc<Keys>,
    pub(crate) token: Vec<u8>,
    pub(crate) fence: u64,
    pub(crate) opts: MutexOptions,
    pub(crate) node_timeout: Duration,
    /// The process that took the lock: a forked child's copy neither renews nor releases it.
    pid: u32,
    /// When renewal stops for good (`max_hold`).
    hold_until: Option<Instant>,
    state: Mutex<State>,
    lost_cv: Condvar,
    /// Serializes network operations on this lock between its owner and the renew thread, so
    /// that no renewal is sent after `unlock` returned.
    pub(crate) op: Mutex<()>,
    callbacks: Mutex<Vec<Callback>>,
}

struct State {
    valid_until: Instant,
    ttl: Duration,
    lost: bool,
    /// Why it was lost, once it was: a sentence and, after a renewal round, what each node
    /// answered.
    why: Option<(String, Vec<NodeReport>)>,
    /// What the nodes answered to the last renewal, while it is not confirmed.
    unconfirmed: Option<Vec<NodeReport>>,
    released: bool,
    renewals: u64,
}

/// The outcome of one extension.
pub(crate) enum Renewal {
    /// Confirmed; look again at this instant.
    Renewed(Instant),
    /// Not confirmed yet, but the lock is still valid: try again at this instant.
    Retry(Instant),
    /// Lost or released.
    Gone,
}

/// What the renew thread should do with a guard that is due.
pub(crate) enum Plan {
    /// Released, lost, or inherited through fork: forget it.
    Forget,
    /// Renew it with this TTL.
    Renew(Duration),
    /// Nothing to renew; look again at this instant (its validity deadline).
    At(Instant),
}

impl GuardShared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Arc<Inner>,
        keys: Arc<Keys>,
        token: Vec<u8>,
        fence: u64,
        opts: MutexOptions,
        node_timeout: Duration,
        acquired_at: Instant,
        valid_until: Instant,
    ) -> GuardShared {
        GuardShared {
            client,
            keys,
            token,
            fence,
            hold_until: opts.max_hold.map(|h| acquired_at + h),
            state: Mutex::new(State {
                valid_until,
                ttl: opts.ttl,
                lost: false,
                why: None,
                unconfirmed: None,
                released: false,
                renewals: 0,
            }),
            opts,
            node_timeout,
            pid: std::process::id(),
            lost_cv: Condvar::new(),
            op: Mutex::new(()),
            callbacks: Mutex::new(Vec::new()),
        }
    }

    fn owned_here(&self) -> bool {
        self.pid == std::process::id()
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.state.lock().valid_until
    }

    /// When the renew thread should look at this guard next after a grant or renewal at `t0`.
    pub(crate) fn next_check(&self, t0: Instant) -> Instant {
        let st = self.state.lock();
        if self.opts.auto_renew {
            t0 + st.ttl / 3
        } else {
            st.valid_until
        }
    }

    pub(crate) fn plan(&self, now: Instant) -> (Plan, Vec<Callback>) {
        if !self.owned_here() {
            return (Plan::Forget, Vec::new());
        }
        let st = self.state.lock();
        if st.released || st.lost {
            return (Plan::Forget, Vec::new());
        }
        if now >= st.valid_until {
            let why = self.ran_out(&st);
            drop(st);
            return (Plan::Forget, self.mark_lost(why));
        }
        if !self.opts.auto_renew {
            return (Plan::At(st.valid_until), Vec::new());
        }
        let ttl = match self.hold_until {
            Some(end) => st.ttl.min(end.saturating_duration_since(now)),
            None => st.ttl,
        };
        if ttl < MIN_TTL {
            return (Plan::At(st.valid_until), Vec::new());
        }
        (Plan::Renew(ttl), Vec::new())
    }

    /// The `WAIT` that follows this guard's extension, and the number of replicas it needs,
    /// when [`min_replicas`](MutexOptions::min_replicas) is on.
    pub(crate) fn replica_wait(&self) -> Option<(u32, Duration)> {
        self.opts.min_replicas
    }

    pub(crate) fn extend_call(&self, ttl: Duration) -> Call {
        Call::new(
            &scripts::EXTEND,
            &[&self.keys.lock],
            &[&self.token, &millis(ttl)],
        )
    }

    /// Applies the answers to an extension sent at `t0` with `ttl`: a renewal counts only if a
    /// quorum confirmed it before the current validity ran out. Returns the callbacks to run.
    pub(crate) fn apply_extend(
        &self,
        t0: Instant,
        ttl: Duration,
        tally: &Tally,
        set_ttl: bool,
    ) -> (Renewal, Vec<Callback>) {
        let n = self.client.nodes.len();
        let quorum = self.client.quorum;
        let now = Instant::now();
        let mut st = self.state.lock();
        if st.released || st.lost {
            return (Renewal::Gone, Vec::new());
        }
        let new_deadline = t0 + ttl.saturating_sub(drift(ttl));
        if tally.yes >= quorum && now < st.valid_until && now < new_deadline {
            st.valid_until = new_deadline;
            if set_ttl {
                st.ttl = ttl;
            }
            st.renewals += 1;
            st.unconfirmed = None;
            let next = if self.opts.auto_renew {
                t0 + st.ttl / 3
            } else {
                st.valid_until
            };
            return (Renewal::Renewed(next), Vec::new());
        }
        // Nodes that said "not yours" can never confirm, and nodes that are down (refused the
        // connection, not merely slow) cannot either: past n - quorum of them, no renewal can
        // succeed, so the loss is reported now rather than at the validity deadline.
        if tally.refused + tally.down > n - quorum || now >= st.valid_until {
            drop(st);
            let why = if tally.refused + tally.down <= n - quorum {
                "its validity ran out before a quorum confirmed a renewal"
            } else if tally
                .reports
                .iter()
                .any(|r| matches!(r.outcome, NodeOutcome::Taken { .. }))
            {
                "another owner has it (a renewal was refused)"
            } else if tally.refused > 0 {
                "it was gone from Redis when it was renewed (expired or deleted)"
            } else {
                "too many of its nodes are down to renew it"
            };
            return (
                Renewal::Gone,
                self.mark_lost((why.to_owned(), tally.reports.clone())),
            );
        }
        st.unconfirmed = Some(tally.reports.clone());
        let retry = self
            .opts
            .retry_delay
            .min((st.valid_until - now) / 3)
            .max(Duration::from_millis(1));
        (
            Renewal::Retry((now + retry).min(st.valid_until)),
            Vec::new(),
        )
    }

    /// Why a lock whose validity ran out without a refused renewal was lost, and what the
    /// nodes said to the last renewal.
    fn ran_out(&self, st: &State) -> (String, Vec<NodeReport>) {
        // The last renewal before max_hold is cut to end with it (less the drift).
        if self
            .hold_until
            .is_some_and(|end| st.valid_until + drift(st.ttl) >= end)
        {
            let hold = self.opts.max_hold.unwrap_or_default().as_millis();
            (format!("its max_hold of {hold} ms ran out"), Vec::new())
        } else if !self.opts.auto_renew {
            ("its TTL ran out (auto-renew is off)".to_owned(), Vec::new())
        } else if let Some(nodes) = &st.unconfirmed {
            (
                "its validity ran out before a quorum confirmed a renewal".to_owned(),
                nodes.clone(),
            )
        } else {
            (
                "its validity ran out before it was renewed (the process or its renew thread \
                 was held up)"
                    .to_owned(),
                Vec::new(),
            )
        }
    }

    /// Why a lock that is lost (or whose validity ran out) was lost.
    fn why_lost(&self, st: &State) -> (String, Vec<NodeReport>) {
        st.why.clone().unwrap_or_else(|| self.ran_out(st))
    }

    /// Marks the lock lost (once), saying why, and hands back the callbacks to run, outside
    /// any lock.
    pub(crate) fn mark_lost(&self, why: (String, Vec<NodeReport>)) -> Vec<Callback> {
        let mut st = self.state.lock();
        if st.lost || st.released {
            return Vec::new();
        }
        st.lost = true;
        st.why = Some(why);
        drop(st);
        self.lost_cv.notify_all();
        std::mem::take(&mut *self.callbacks.lock())
    }

    /// Releases on every node; used by `unlock` and `Drop`.
    fn release(&self) -> Result<Released, Error> {
        if !self.owned_here() {
            return Err(Error::new(
                ErrorKind::NotHeld,
                "this guard was inherited through fork; only the process that took the lock releases it",
            ));
        }
        let _op = self.op.lock();
        let (lost, valid_until) = {
            let mut st = self.state.lock();
            if st.released {
                return Err(Error::new(
                    ErrorKind::NotHeld,
                    "the lock was already released",
                ));
            }
            st.released = true;
            let lost = (st.lost || Instant::now() >= st.valid_until).then(|| self.why_lost(&st).0);
            (lost, st.valid_until)
        };
        self.lost_cv.notify_all();
        let tally = self.release_everywhere(valid_until);
        // Bookkeeping after the release is sent: a waiter's wake-up does not wait for it (no
        // callback runs once `released` is set, and the renew thread skips the guard).
        self.callbacks.lock().clear();
        self.client.renewer.forget();
        let report = Released::from_tally(&tally);
        let n = self.client.nodes.len();
        if lost.is_some() || tally.refused > n - self.client.quorum {
            let what = match lost {
                Some(why) => format!("the lock was lost before it was released: {why}"),
                None => "the lock was lost before it was released".to_owned(),
            };
            return Err(
                Error::from_report(&what, ErrorKind::Lost, tally.reports, None)
                    .with_kind(ErrorKind::Lost),
            );
        }
        if tally.yes >= self.client.quorum {
            return Ok(report);
        }
        Err(Error::from_report(
            "release was not confirmed by a quorum of nodes; the lock expires by its TTL",
            ErrorKind::NoQuorum,
            tally.reports,
            tally.source,
        ))
    }
}

impl GuardShared {
    /// Sends the release to every node; while fewer than a quorum confirmed and no quorum
    /// said "not yours", asks the nodes that failed again, like a lock call riding over an
    /// outage (a restart, a failover): for up to the connect timeout, and never past the
    /// lock's validity, after which it expires by itself.
    fn release_everywhere(&self, valid_until: Instant) -> Tally {
        let nodes = &self.client.nodes;
        let n = nodes.len();
        let call = release_call(&self.keys, &self.token, &self.opts, true);
        let give_up = (Instant::now() + self.client.connect_timeout).min(valid_until);
        let mut answers: Vec<NodeAnswer> = (0..n).map(|_| Ok(Vec::new())).collect();
        let mut ask: Vec<usize> = (0..n).collect();
        let mut again = false;
        loop {
            let mut calls: Vec<&[Call]> = vec![&[]; n];
            for &i in &ask {
                calls[i] = std::slice::from_ref(&call);
            }
            let round = quorum::exchange(nodes, &calls, Instant::now() + self.node_timeout, None);
            for (i, mut answer) in round.into_iter().enumerate() {
                if !ask.contains(&i) {
                    continue;
                }
                // Asked again within the validity, a node where the lock is missing most
                // likely applied our first request late (its reply was lost): released.
                if again
                    && Instant::now() < valid_until
                    && let Ok(values) = &mut answer
                    && let Some(Ok(v @ Value::Int(0))) = values.first_mut()
                {
                    *v = Value::Int(1);
                }
                answers[i] = answer;
            }
            let tally = Tally::of_ints(nodes, &answers, 0, None);
            ask.retain(|&i| !matches!(&answers[i], Ok(v) if matches!(v.first(), Some(Ok(_)))));
            if tally.yes >= self.client.quorum
                || tally.refused > n - self.client.quorum
                || ask.is_empty()
            {
                return tally;
            }
            let pause = token::jitter(self.opts.retry_delay);
            if Instant::now() + pause > give_up {
                return tally;
            }
            std::thread::sleep(pause);
            again = true;
        }
    }
}

/// The release script call for one lock and token. `handoff` leaves the short hand-off window
/// for waiters (a real release); a failed attempt's clean-up does not.
pub(crate) fn release_call(keys: &Keys, token: &[u8], opts: &MutexOptions, handoff: bool) -> Call {
    let window = if handoff {
        opts.handoff_window.min(opts.ttl)
    } else {
        Duration::ZERO
    };
    Call::new(
        &scripts::RELEASE,
        &[&keys.lock, &keys.wake, &keys.waiters, &keys.handoff],
        &[token, &millis(opts.wait_cap), &millis(window)],
    )
}

/// A duration in whole milliseconds, as a script argument.
pub(crate) fn millis(d: Duration) -> Decimal {
    Decimal::new(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs on-lost callbacks; a panicking callback is logged and does not stop the others.
pub(crate) fn fire(callbacks: Vec<Callback>) {
    for cb in callbacks {
        if catch_unwind(AssertUnwindSafe(cb)).is_err() {
            log::error!("redmutex: an on-lost callback panicked");
        }
    }
}

/// What an explicit unlock did on each node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// Nodes where our lock was deleted.
    pub released: usize,
    /// Nodes where the lock had already expired.
    pub expired: usize,
    /// Nodes where another owner's value had replaced ours (left untouched).
    pub taken: usize,
    /// Nodes that could not be asked.
    pub failed: usize,
    /// Each node's answer.
    pub nodes: Vec<NodeReport>,
}

impl Released {
    fn from_tally(t: &Tally) -> Released {
        Released {
            released: t.yes,
            expired: t.missing,
            taken: t.refused - t.missing,
            failed: t.failed,
            nodes: t.reports.clone(),
        }
    }
}

/// Proof that this process holds the lock, until it is released or lost.
///
/// The guard owns everything it needs (no borrowed lifetime), is `Send`, and releases the lock
/// when dropped (best effort, bounded by the node timeout, never panics; use
/// [`MutexGuard::unlock`] to learn the outcome). While it lives, the client's renew thread
/// keeps the lock (unless auto-renew is off).
///
/// A guard answers "do I still hold it?" locally, without the network: [`is_held`],
/// [`check`], [`valid_until`]. The validity deadline is on the monotonic clock and already
/// accounts for clock drift, as the Redlock text requires.
///
/// [`is_held`]: MutexGuard::is_held
/// [`check`]: MutexGuard::check
/// [`valid_until`]: MutexGuard::valid_until
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard {
    pub(crate) shared: Arc<GuardShared>,
}

impl MutexGuard {
    /// The fence number: strictly greater than that of every earlier holder of this name
    /// (0 when fencing is off). Pass it to the resource you protect, and have the resource
    /// reject writes that carry a lower number than one it has already seen.
    pub fn fence(&self) -> u64 {
        self.shared.fence
    }

    /// The token: the value of the lock key (`owner-label:random-hex`).
    pub fn token(&self) -> &[u8] {
        &self.shared.token
    }

    /// The lock's name (its Redis key).
    pub fn name(&self) -> &[u8] {
        &self.shared.keys.lock
    }

    /// Whether we still hold the lock, answered locally: not released, not reported lost and
    /// before the validity deadline. Always false in a forked child.
    pub fn is_held(&self) -> bool {
        if !self.shared.owned_here() {
            return false;
        }
        let st = self.shared.state.lock();
        !st.lost && !st.released && Instant::now() < st.valid_until
    }

    /// `Ok` while [`is_held`](MutexGuard::is_held); no network.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Lost`] once the lock expired or was taken over; its message says why
    /// (another owner has it, it was gone when renewed, too many nodes are down, its validity
    /// or `max_hold` ran out) and [`Error::nodes`] what each node answered to the renewal that
    /// found out, if one did. [`ErrorKind::NotHeld`] after [`release`](MutexGuard::release) or
    /// in a forked child, whose copy of the guard was never its own.
    pub fn check(&self) -> Result<(), Error> {
        if self.is_held() {
            Ok(())
        } else if !self.shared.owned_here() {
            Err(Error::new(
                ErrorKind::NotHeld,
                "this guard was inherited through fork; the lock belongs to the parent process",
            ))
        } else {
            let st = self.shared.state.lock();
            if st.released {
                return Err(Error::new(ErrorKind::NotHeld, "the lock was released"));
            }
            let (why, nodes) = self.shared.why_lost(&st);
            Err(Error::new(ErrorKind::Lost, why).with_nodes(nodes))
        }
    }

    /// The local validity deadline: until then, no other client can hold the lock (given the
    /// bounded clock drift the Redlock text assumes). Renewal moves it forward.
    pub fn valid_until(&self) -> Instant {
        self.shared.valid_until()
    }

    /// How many renewals (automatic or [`extend`](MutexGuard::extend)) succeeded so far.
    pub fn renewals(&self) -> u64 {
        self.shared.state.lock().renewals
    }

    /// Sets the lease to `ttl` from now on a quorum of nodes, checking our token; later
    /// automatic renewals use this `ttl` too. Never re-creates a lock that is gone.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Lost`] when the lock is gone or another owner has it;
    /// [`ErrorKind::NoQuorum`] (or the node's own kind, with one node) when not enough nodes
    /// confirmed — the lock may still be held until [`valid_until`](MutexGuard::valid_until);
    /// [`ErrorKind::InvalidArgument`] for a TTL out of range.
    pub fn extend(&self, ttl: Duration) -> Result<(), Error> {
        check_ttl(ttl)?;
        self.check()?;
        let shared = &self.shared;
        let op = shared.op.lock();
        let nodes = &shared.client.nodes;
        let t0 = Instant::now();
        let mut calls = vec![shared.extend_call(ttl)];
        let replicas = shared.replica_wait();
        if let Some((n, timeout)) = replicas {
            calls.push(Call::wait(n, timeout));
        }
        let answers = quorum::exchange(
            nodes,
            &vec![&calls[..]; nodes.len()],
            t0 + shared.node_timeout + shared.opts.replica_wait(),
            None,
        );
        let tally = Tally::of_ints(nodes, &answers, 0, replicas.map(|(n, _)| (1, n)));
        let (result, callbacks) = shared.apply_extend(t0, ttl, &tally, true);
        drop(op);
        fire(callbacks);
        match result {
            Renewal::Renewed(next) => {
                shared.client.renewer.schedule(next, shared);
                Ok(())
            }
            _ if !self.is_held() => {
                Err(
                    Error::from_report("the lock was lost", ErrorKind::Lost, tally.reports, None)
                        .with_kind(ErrorKind::Lost),
                )
            }
            _ => Err(Error::from_report(
                "extend was not confirmed by a quorum of nodes",
                ErrorKind::NoQuorum,
                tally.reports,
                tally.source,
            )),
        }
    }

    /// Registers a callback that runs once when the lock is lost (renewal failed or another
    /// owner took over; [`check`](MutexGuard::check) then says which). It runs on the client's
    /// renew thread (or, if the loss is discovered by a call of yours, on your thread after
    /// that call); keep it short and never block in it.
    /// If the lock is already lost, it runs at once on this thread. It never starts after
    /// the guard was released (one that already started may still be running).
    pub fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        let lost = {
            let st = self.shared.state.lock();
            if st.released {
                return;
            }
            (st.lost || Instant::now() >= st.valid_until).then(|| self.shared.ran_out(&st))
        };
        if let Some(why) = lost {
            fire(self.shared.mark_lost(why));
            fire(vec![Box::new(callback)]);
        } else {
            self.shared.callbacks.lock().push(Box::new(callback));
        }
    }

    /// Blocks until the lock is lost (`true`) or `timeout` passes (`false`); for watchdog
    /// threads. Returns `false` at once when the guard was released.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let shared = &self.shared;
        let mut st = shared.state.lock();
        loop {
            if st.released {
                return false;
            }
            let now = Instant::now();
            if st.lost || now >= st.valid_until {
                let why = shared.ran_out(&st);
                drop(st);
                fire(shared.mark_lost(why));
                return true;
            }
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            let until = deadline.map_or(st.valid_until, |d| d.min(st.valid_until));
            st = shared.lost_cv.wait_until(st, until);
        }
    }

    /// Releases the lock on every node (compare-and-delete: only if it still holds our token)
    /// and reports what each node did. Nodes that cannot be reached are asked again, like a
    /// lock call riding over an outage, for up to the client's connect timeout and never past
    /// the lock's validity.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Lost`] when the lock had expired or another owner had it (their value is
    /// left in place); [`ErrorKind::NoQuorum`] (or the node's own kind, with one node) when
    /// not enough nodes confirmed — the lock then expires by its TTL.
    pub fn unlock(self) -> Result<Released, Error> {
        self.shared.release()
    }

    /// Like [`unlock`](MutexGuard::unlock), through a shared reference: for a guard shared
    /// between threads (in an `Arc`, or held by a binding). Afterwards the guard is released
    /// for good: [`is_held`](MutexGuard::is_held) is false, dropping it does nothing, and a
    /// second call returns [`ErrorKind::NotHeld`].
    ///
    /// # Errors
    ///
    /// As [`unlock`](MutexGuard::unlock), plus [`ErrorKind::NotHeld`] when already released.
    pub fn release(&self) -> Result<Released, Error> {
        self.shared.release()
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        if !self.shared.owned_here() {
            return;
        }
        if self.shared.state.lock().released {
            return;
        }
        match self.shared.release() {
            Ok(_) => {}
            Err(e) => log::warn!(
                "redmutex: releasing {} on drop: {e}",
                String::from_utf8_lossy(&self.shared.keys.lock)
            ),
        }
    }
}

impl std::fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("name", &String::from_utf8_lossy(&self.shared.keys.lock))
            .field("fence", &self.shared.fence)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
