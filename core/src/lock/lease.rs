//! The lease: what a grant of the lock is worth locally — its token, fence and validity —
//! and how it is kept (renewal), extended and lost, with the reason it was lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::cleanup::Cleanup;
use super::clock::Stamp;
use super::keys::Keys;
use super::renew::{Callback, Duty, Renewable, Renewal, fire};
use super::scripts::{self, Call, millis};
use super::tally::Tally;
use super::voters::Voters;
use crate::error::{Error, ErrorKind, NodeOutcome, NodeReport};
use crate::options::{MIN_TTL, MutexOptions, drift};
use crate::sync::{LocalCondvar, LocalMutex};

/// Everything a grant owns, shared between its guard and the renew thread (which holds only
/// a weak reference).
pub(crate) struct Lease {
    pub(crate) voters: Arc<Voters>,
    pub(crate) keys: Arc<Keys>,
    pub(crate) token: Vec<u8>,
    pub(crate) fence: u64,
    pub(crate) opts: MutexOptions,
    pub(crate) node_timeout: Duration,
    /// The process that took the lock: a forked child's copy neither renews nor releases it.
    pid: u32,
    /// When renewal stops for good (`max_hold`).
    hold_until: Option<Stamp>,
    pub(super) state: LocalMutex<State>,
    pub(super) lost_cv: LocalCondvar,
    /// Serializes network operations on this lock between its owner and the renew thread, so
    /// that no renewal is sent after `unlock` returned.
    pub(super) op: LocalMutex<()>,
    pub(super) callbacks: LocalMutex<Vec<Callback>>,
    /// The renew thread's schedule of this lease (see [`Renewable::generation`]).
    pub(super) generation: AtomicU64,
    /// Told the new validity deadline after every confirmed renewal.
    renewed: LocalMutex<Option<Observer>>,
}

/// Sees each confirmed renewal's new validity deadline.
pub(crate) type Observer = Arc<dyn Fn(Instant) + Send + Sync>;

pub(super) struct State {
    /// On the lease clock (`clock.rs`): it keeps running while the machine is suspended.
    pub(super) valid_until: Stamp,
    /// `valid_until` as an `Instant`, as far as could be told when it was set: what the
    /// guard shows, and what its waits time out at (they check `valid_until` itself).
    pub(super) valid_until_at: Instant,
    pub(super) ttl: Duration,
    pub(super) lost: bool,
    /// Why it was lost, once it was: a sentence and, after a renewal round, what each node
    /// answered.
    pub(super) why: Option<(String, Vec<NodeReport>)>,
    /// What the nodes answered to the last renewal, while it is not confirmed.
    pub(super) unconfirmed: Option<Vec<NodeReport>>,
    pub(super) released: bool,
    pub(super) renewals: u64,
}

impl Lease {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        voters: Arc<Voters>,
        keys: Arc<Keys>,
        token: Vec<u8>,
        fence: u64,
        opts: MutexOptions,
        node_timeout: Duration,
        acquired_at: Stamp,
        valid_until: Stamp,
    ) -> Lease {
        let valid_until_at = voters.clock.instant_of(valid_until);
        Lease {
            voters,
            keys,
            token,
            fence,
            hold_until: opts.max_hold.map(|h| acquired_at + h),
            state: LocalMutex::new(State {
                valid_until,
                valid_until_at,
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
            lost_cv: LocalCondvar::new(),
            op: LocalMutex::new(()),
            callbacks: LocalMutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            renewed: LocalMutex::new(None),
        }
    }

    /// Whether this process took the lock: a forked child's copy is never its own.
    pub(crate) fn owned_here(&self) -> bool {
        self.pid == std::process::id()
    }

    /// The lease clock's reading now.
    pub(crate) fn now(&self) -> Stamp {
        self.voters.clock.now()
    }

    /// The validity deadline, as an `Instant` (as far as can be told now).
    pub(crate) fn valid_until(&self) -> Instant {
        self.state.lock().valid_until_at
    }

    /// When the renew thread should look at this guard next after a grant or renewal at `t0`.
    pub(crate) fn next_check(&self, t0: Stamp) -> Instant {
        let at = self.next_at(&self.state.lock(), t0);
        self.voters.clock.instant_of(at)
    }

    /// After a grant or renewal at `t0`: a third of the lease on, to renew; or, without
    /// renewal, the end of the validity.
    fn next_at(&self, st: &State, t0: Stamp) -> Stamp {
        if self.opts.auto_renew {
            t0 + st.ttl / 3
        } else {
            st.valid_until
        }
    }

    /// The extension of this lease to `ttl`: the extend script with its token.
    pub(super) fn extend_request(&self, ttl: Duration) -> Call {
        Call::new(
            &scripts::EXTEND,
            &[&self.keys.lock],
            &[&self.token, &millis(ttl)],
        )
    }

    /// Applies the answers to an extension sent at `t0` with `ttl`: a renewal counts only if a
    /// quorum confirmed it before the current validity ran out. Returns the callbacks to run.
    pub(super) fn settle_extend(
        &self,
        t0: Stamp,
        ttl: Duration,
        tally: &Tally,
        set_ttl: bool,
    ) -> (Renewal, Vec<Callback>) {
        let n = self.voters.nodes.len();
        let quorum = self.voters.quorum;
        let now = self.now();
        let clock = &self.voters.clock;
        let mut st = self.state.lock();
        if st.released || st.lost {
            return (Renewal::Gone, Vec::new());
        }
        let new_deadline = t0 + ttl.saturating_sub(drift(ttl));
        if tally.yes >= quorum && now < st.valid_until && now < new_deadline {
            st.valid_until = new_deadline;
            st.valid_until_at = clock.instant_of(new_deadline);
            if set_ttl {
                st.ttl = ttl;
            }
            st.renewals += 1;
            st.unconfirmed = None;
            let next = self.next_at(&st, t0);
            let until = st.valid_until_at;
            let told: Vec<Callback> = self
                .renewed
                .lock()
                .clone()
                .map_or(Vec::new(), |o| vec![Box::new(move || o(until))]);
            return (Renewal::Renewed(clock.instant_of(next)), told);
        }
        // Nodes that said "not yours" can never confirm: past n - quorum of them, no renewal
        // can succeed, so the loss is reported now rather than at the validity deadline. A
        // node that refuses the connection may be restarting with the key on disk: it is
        // asked again within the validity, like a slow one.
        if tally.refused > n - quorum || now >= st.valid_until {
            drop(st);
            let taken = tally
                .reports
                .iter()
                .any(|r| matches!(r.outcome, NodeOutcome::Taken { .. }));
            let why = if tally.refused > n - quorum && taken {
                "another owner has it (a renewal was refused)"
            } else if tally.refused > n - quorum {
                "it was gone from Redis when it was renewed (expired or deleted)"
            } else if tally.down > n - quorum {
                "too many of its nodes are down to renew it"
            } else {
                "its validity ran out before a quorum confirmed a renewal"
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
            .min(st.valid_until.since(now) / 3)
            .max(Duration::from_millis(1));
        (
            Renewal::Retry(clock.instant_of((now + retry).min(st.valid_until))),
            Vec::new(),
        )
    }

    /// Why a lock whose validity ran out without a refused renewal was lost, and what the
    /// nodes said to the last renewal.
    pub(super) fn ran_out(&self, st: &State) -> (String, Vec<NodeReport>) {
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
    pub(super) fn why_lost(&self, st: &State) -> (String, Vec<NodeReport>) {
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
        let ttl = st.ttl;
        drop(st);
        self.lost_cv.notify_all();
        // Renewals that timed out may still run and keep the key for a TTL although nobody
        // holds it: remove it (token-checked) from every node, in the background.
        let all = (0..self.voters.nodes.len()).collect();
        let until = Instant::now() + ttl + self.node_timeout;
        let cleanup = Cleanup::new(
            &self.keys,
            &self.token,
            &self.opts,
            self.node_timeout,
            all,
            until,
        );
        self.voters.renewer.clean_up(cleanup);
        std::mem::take(&mut *self.callbacks.lock())
    }

    /// Whether we still hold the lock, answered locally: not released, not reported lost and
    /// before the validity deadline. Always false in a forked child.
    pub(crate) fn is_held(&self) -> bool {
        if !self.owned_here() {
            return false;
        }
        let now = self.now();
        let st = self.state.lock();
        !st.lost && !st.released && now < st.valid_until
    }

    /// `Ok` while held; otherwise why not. No network.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.is_held() {
            Ok(())
        } else if !self.owned_here() {
            Err(Error::new(
                ErrorKind::NotHeld,
                "this guard was inherited through fork; the lock belongs to the parent process",
            ))
        } else {
            let st = self.state.lock();
            if st.released {
                return Err(Error::new(ErrorKind::NotHeld, "the lock was released"));
            }
            let (why, nodes) = self.why_lost(&st);
            Err(Error::new(ErrorKind::Lost, why).with_nodes(nodes))
        }
    }

    /// Tells `observer` the new validity deadline after every confirmed renewal, as it
    /// happens (on the thread that renewed).
    pub(crate) fn on_renewed(&self, observer: Observer) {
        *self.renewed.lock() = Some(observer);
    }

    /// How many renewals succeeded so far.
    pub(crate) fn renewals(&self) -> u64 {
        self.state.lock().renewals
    }

    /// Whether the lease was released (by its owner).
    pub(crate) fn is_released(&self) -> bool {
        self.state.lock().released
    }

    /// Registers a callback that runs once when the lock is lost; at once when it already is;
    /// never once it was released.
    pub(crate) fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        let lost = {
            let st = self.state.lock();
            if st.released {
                return;
            }
            (st.lost || self.now() >= st.valid_until).then(|| self.ran_out(&st))
        };
        if let Some(why) = lost {
            fire(self.mark_lost(why));
            fire(vec![Box::new(callback)]);
        } else {
            self.callbacks.lock().push(Box::new(callback));
        }
    }

    /// Blocks until the lock is lost (`true`) or `timeout` passes (`false`); `false` at once
    /// when it was released.
    pub(crate) fn wait_lost(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut st = self.state.lock();
        loop {
            if st.released {
                return false;
            }
            if st.lost || self.now() >= st.valid_until {
                let why = self.ran_out(&st);
                drop(st);
                fire(self.mark_lost(why));
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            let until = deadline.map_or(st.valid_until_at, |d| d.min(st.valid_until_at));
            st = self.lost_cv.wait_until(st, until);
        }
    }
}

impl Renewable for Lease {
    fn due(&self) -> (Duty, Vec<Callback>) {
        if !self.owned_here() {
            return (Duty::Forget, Vec::new());
        }
        let now = self.now();
        let st = self.state.lock();
        if st.released || st.lost {
            return (Duty::Forget, Vec::new());
        }
        if now >= st.valid_until {
            let why = self.ran_out(&st);
            drop(st);
            return (Duty::Forget, self.mark_lost(why));
        }
        let until = st.valid_until_at;
        if !self.opts.auto_renew {
            return (Duty::At(until), Vec::new());
        }
        let ttl = match self.hold_until {
            Some(end) => st.ttl.min(end.since(now)),
            None => st.ttl,
        };
        if ttl < MIN_TTL {
            return (Duty::At(until), Vec::new());
        }
        (Duty::Renew(ttl), Vec::new())
    }

    fn gate(&self) -> &LocalMutex<()> {
        &self.op
    }

    fn extend_call(&self, ttl: Duration) -> Call {
        self.extend_request(ttl)
    }

    fn replica_wait(&self) -> Option<(u32, Duration)> {
        self.opts.min_replicas
    }

    fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    fn apply_extend(&self, t0: Stamp, ttl: Duration, tally: &Tally) -> (Renewal, Vec<Callback>) {
        self.settle_extend(t0, ttl, tally, false)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::clock::{Clock, ManualClock};

    /// A holder whose machine was suspended past its validity does not believe it still
    /// holds the lock when it wakes: the lease clock ran on while `Instant` stood still.
    #[test]
    fn a_suspend_past_the_validity_loses_the_lease() {
        let clock = Arc::new(ManualClock::new());
        let voters = Arc::new(Voters::with_clock(
            Vec::new(),
            None,
            Duration::from_secs(1),
            Some("test".into()),
            Arc::clone(&clock) as Arc<dyn Clock>,
        ));
        let now = clock.now();
        let lease = Lease::new(
            voters,
            Arc::new(Keys::new(b"suspend")),
            b"test:00".to_vec(),
            1,
            MutexOptions::default(),
            Duration::from_millis(100),
            now,
            now + Duration::from_secs(10),
        );
        assert!(lease.is_held());
        clock.advance(Duration::from_secs(9));
        assert!(lease.is_held());
        clock.advance(Duration::from_secs(2));
        assert!(!lease.is_held());
        let err = lease.check().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Lost);
        assert!(lease.wait_lost(Duration::ZERO));
    }
}
