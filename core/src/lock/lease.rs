//! The lease: what a grant of the lock is worth locally — its token, fence and validity —
//! and how it is kept (renewal), extended and lost, with the reason it was lost. Its state
//! and every decision about it are the I/O-free [`Hold`]; this is its blocking driver, with
//! the clock, the callbacks and the waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::calls;
use super::cleanup::Cleanup;
use super::clock::{Reading, Stamp};
use super::proto::Spec;
use super::proto::hold::{Due, Extended, Hold, Why};
use super::proto::round::Grant;
use super::renew::{Callback, Duty, Renewable, Renewal, fire};
use super::scripts::Call;
use super::tally::Tally;
use super::voters::Voters;
use crate::error::{Error, ErrorKind};
use crate::process;
use crate::stats::LossReason;
use crate::sync::{LocalCondvar, LocalMutex};

/// Everything a grant owns, shared between its guard and the renew thread (which holds only
/// a weak reference).
pub(crate) struct Lease {
    pub(crate) voters: Arc<Voters>,
    pub(crate) spec: Spec,
    pub(crate) token: Vec<u8>,
    pub(crate) fence: u64,
    /// The process that took the lock: a forked child's copy neither renews nor releases it.
    pid: u32,
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
    /// When it was granted (for the client's `held_seconds`).
    granted_at: Instant,
    /// Whether its end (release or loss) was counted in the client's figures.
    ended: AtomicBool,
}

/// Sees each confirmed renewal's new validity deadline.
pub(crate) type Observer = Arc<dyn Fn(Instant) + Send + Sync>;

pub(super) struct State {
    pub(super) hold: Hold,
    /// The validity deadline as an `Instant`, as far as could be told when it was set: what
    /// the guard shows, and what its waits time out at (they check the lease clock itself).
    pub(super) valid_until_at: Instant,
    /// When the grant or the last renewal was sent.
    t0: Stamp,
    /// Threads in `wait_lost`: only then does a release or a loss wake the condition
    /// variable (a notify is a system call even when nobody waits).
    pub(super) waiting: usize,
}

impl Lease {
    /// The lease of `grant`, made when the lease clock read `now`.
    pub(crate) fn new(voters: Arc<Voters>, spec: &Spec, grant: Grant, now: &Reading) -> Lease {
        let valid_until_at = now.instant_of(grant.valid_until);
        voters.counters.held();
        Lease {
            state: LocalMutex::new(State {
                hold: Hold::new(spec, grant.t0, grant.valid_until),
                valid_until_at,
                t0: grant.t0,
                waiting: 0,
            }),
            voters,
            spec: spec.clone(),
            token: grant.token,
            fence: grant.fence,
            pid: process::id(),
            lost_cv: LocalCondvar::new(),
            op: LocalMutex::new(()),
            callbacks: LocalMutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            renewed: LocalMutex::new(None),
            granted_at: Instant::now(),
            ended: AtomicBool::new(false),
        }
    }

    /// Counts the end of this lease in the client's figures, once: released, or `lost`.
    pub(crate) fn end(&self, lost: Option<LossReason>) {
        if self.owned_here() && !self.ended.swap(true, Ordering::AcqRel) {
            let held = self.granted_at.elapsed();
            self.voters.counters.ended(held, lost);
        }
    }

    /// Whether this process took the lock: a forked child's copy is never its own.
    pub(crate) fn owned_here(&self) -> bool {
        self.pid == process::id()
    }

    /// The lease clock's reading now.
    pub(crate) fn now(&self) -> Stamp {
        self.voters.clock.now()
    }

    /// The validity deadline, as an `Instant` (as far as can be told now).
    pub(crate) fn valid_until(&self) -> Instant {
        self.state.lock().valid_until_at
    }

    /// When the renew thread should look at this guard first.
    pub(crate) fn next_check(&self, now: &Reading) -> Instant {
        let st = self.state.lock();
        now.instant_of(st.hold.next_at(st.t0))
    }

    /// The extension of this lease to `ttl`: the extend script with its token.
    pub(super) fn extend_request(&self, ttl: Duration) -> Call {
        calls::extend_call(&self.spec, &self.token, ttl)
    }

    /// Applies the answers to an extension sent at `t0` with `ttl` (see [`Hold::extended`]).
    /// Returns the callbacks to run.
    pub(super) fn settle_extend(
        &self,
        t0: Stamp,
        ttl: Duration,
        tally: &Tally,
        set_ttl: bool,
    ) -> (Renewal, Vec<Callback>) {
        let now = self.voters.clock.read();
        let mut st = self.state.lock();
        let extended = st.hold.extended(t0, ttl, tally, now.stamp, set_ttl);
        // The renew thread's rounds count as renewals; a user's extend does not.
        if !set_ttl && !matches!(extended, Extended::Gone) {
            let confirmed = matches!(extended, Extended::Renewed(_));
            self.voters.counters.renewal(confirmed);
        }
        match extended {
            Extended::Renewed(next) => {
                st.valid_until_at = now.instant_of(st.hold.valid_until);
                st.t0 = t0;
                let until = st.valid_until_at;
                let told: Vec<Callback> = self
                    .renewed
                    .lock()
                    .clone()
                    .map_or(Vec::new(), |o| vec![Box::new(move || o(until))]);
                (Renewal::Renewed(now.instant_of(next)), told)
            }
            Extended::Retry(at) => (Renewal::Retry(now.instant_of(at)), Vec::new()),
            Extended::Lost(why) => {
                drop(st);
                (Renewal::Gone, self.mark_lost(why))
            }
            Extended::Gone => (Renewal::Gone, Vec::new()),
        }
    }

    /// Marks the lock lost (once), saying why, and hands back the callbacks to run, outside
    /// any lock.
    pub(crate) fn mark_lost(&self, why: Why) -> Vec<Callback> {
        let mut st = self.state.lock();
        let reason = why.reason;
        if !st.hold.lose(why) {
            return Vec::new();
        }
        let (ttl, waiting) = (st.hold.ttl, st.waiting);
        drop(st);
        // Counted before anyone is told: a figure read after `wait_lost` returns has it.
        self.end(Some(reason));
        if waiting > 0 {
            self.lost_cv.notify_all();
        }
        // Renewals that timed out may still run and keep the key for a TTL although nobody
        // holds it: remove it (token-checked) from every node, in the background.
        let all = (0..self.spec.n).collect();
        let until = Instant::now() + ttl + self.spec.node_timeout;
        let cleanup = Cleanup::new(&self.spec, &self.token, all, until);
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
        self.state.lock().hold.is_held(now)
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
            if st.hold.released {
                return Err(Error::new(ErrorKind::NotHeld, "the lock was released"));
            }
            let why = st.hold.why_lost();
            Err(Error::new(ErrorKind::Lost, why.text).with_nodes(why.nodes))
        }
    }

    /// Tells `observer` the new validity deadline after every confirmed renewal, as it
    /// happens (on the thread that renewed).
    pub(crate) fn on_renewed(&self, observer: Observer) {
        *self.renewed.lock() = Some(observer);
    }

    /// How many renewals succeeded so far.
    pub(crate) fn renewals(&self) -> u64 {
        self.state.lock().hold.renewals
    }

    /// Whether the lease was released (by its owner).
    pub(crate) fn is_released(&self) -> bool {
        self.state.lock().hold.released
    }

    /// Registers a callback that runs once when the lock is lost; at once when it already is;
    /// never once it was released.
    pub(crate) fn on_lost(&self, callback: impl FnOnce() + Send + 'static) {
        let lost = {
            let st = self.state.lock();
            if st.hold.released {
                return;
            }
            (!st.hold.is_held(self.now())).then(|| st.hold.ran_out())
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
            if st.hold.released {
                return false;
            }
            if !st.hold.is_held(self.now()) {
                let why = st.hold.ran_out();
                drop(st);
                fire(self.mark_lost(why));
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            let until = deadline.map_or(st.valid_until_at, |d| d.min(st.valid_until_at));
            st.waiting += 1;
            st = self.lost_cv.wait_until(st, until);
            st.waiting -= 1;
        }
    }
}

/// A lease dropped without a release or a loss (its guard forgotten) ends here.
impl Drop for Lease {
    fn drop(&mut self) {
        self.end(None);
    }
}

impl Renewable for Lease {
    fn due(&self) -> (Duty, Vec<Callback>) {
        if !self.owned_here() {
            return (Duty::Forget, Vec::new());
        }
        let now = self.now();
        let st = self.state.lock();
        match st.hold.due(now) {
            Due::Forget => (Duty::Forget, Vec::new()),
            Due::RanOut(why) => {
                drop(st);
                (Duty::Forget, self.mark_lost(why))
            }
            Due::At(_) => (Duty::At(st.valid_until_at), Vec::new()),
            Due::Renew(ttl) => (Duty::Renew(ttl), Vec::new()),
        }
    }

    fn gate(&self) -> &LocalMutex<()> {
        &self.op
    }

    fn renewing_late(&self, lag: Duration) {
        self.voters.counters.renewal_lag(lag);
    }

    fn extend_call(&self, ttl: Duration) -> Call {
        self.extend_request(ttl)
    }

    fn replica_wait(&self) -> Option<(u32, Duration)> {
        self.spec.opts.min_replicas
    }

    fn node_timeout(&self) -> Duration {
        self.spec.node_timeout
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
    use crate::lock::keys::Keys;
    use crate::options::MutexOptions;

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
        let now = clock.read();
        let spec = Spec::new(
            Arc::new(Keys::new(b"suspend")),
            MutexOptions::default(),
            Duration::from_millis(100),
            1,
        )
        .unwrap();
        let grant = Grant {
            token: b"test:00".to_vec(),
            fence: 1,
            t0: now.stamp,
            valid_until: now.stamp + Duration::from_secs(10),
            withdraw_on: Vec::new(),
        };
        let lease = Lease::new(voters, &spec, grant, &now);
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
