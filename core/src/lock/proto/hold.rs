//! The lease's state as a state machine: held until the validity runs out, renewed by
//! extensions that a quorum confirms in time, lost (with the reason) or released. Every
//! reading of the lease clock comes in as an argument.

use std::time::Duration;

use super::spec::Spec;
use crate::error::{NodeOutcome, NodeReport};
use crate::lock::clock::Stamp;
use crate::lock::tally::Tally;
use crate::options::{MIN_TTL, drift};
use crate::stats::LossReason;

/// Why a lease was lost: the reason, as counted; its sentence, as the user reads it; and,
/// after a renewal round, what each node answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Why {
    /// The reason, as counted.
    pub reason: LossReason,
    /// The sentence the user reads.
    pub text: String,
    /// What each node answered, after a renewal round.
    pub nodes: Vec<NodeReport>,
}

impl Why {
    /// A loss for `reason`, told by `text`, with the nodes' answers.
    pub fn new(reason: LossReason, text: impl Into<String>, nodes: Vec<NodeReport>) -> Why {
        Why {
            reason,
            text: text.into(),
            nodes,
        }
    }
}

/// Why nodes refused a renewal or a release of ours: another owner's token was in the key
/// (on any of them), or the key was gone.
pub(crate) fn refusal(tally: &Tally) -> LossReason {
    let taken = tally
        .reports
        .iter()
        .any(|r| matches!(r.outcome, NodeOutcome::Taken { .. }));
    if taken {
        LossReason::AnotherOwner
    } else {
        LossReason::Gone
    }
}

/// One lease's state.
pub struct Hold {
    /// On the lease clock: it keeps running while the machine is suspended.
    pub valid_until: Stamp,
    /// The TTL renewals ask for.
    pub(crate) ttl: Duration,
    pub(crate) lost: bool,
    /// Why it was lost, once it was.
    pub(crate) why: Option<Why>,
    /// What the nodes answered to the last renewal, while it is not confirmed.
    pub(crate) unconfirmed: Option<Vec<NodeReport>>,
    pub(crate) released: bool,
    pub(crate) renewals: u64,
    auto_renew: bool,
    retry_delay: Duration,
    max_hold: Option<Duration>,
    /// When renewal stops for good (`max_hold`).
    hold_until: Option<Stamp>,
    n: usize,
    quorum: usize,
}

/// What a lease needs when its time to be looked at comes.
#[derive(Debug, PartialEq)]
pub enum Due {
    /// Released or lost: nothing more to do.
    Forget,
    /// Its validity ran out just now, for this reason.
    RanOut(Why),
    /// Nothing to renew; look again at this reading (its validity deadline).
    At(Stamp),
    /// Renew it with this TTL.
    Renew(Duration),
}

/// What the answers to one extension did.
#[derive(Debug, PartialEq)]
pub enum Extended {
    /// Confirmed by a quorum in time; look again at this reading.
    Renewed(Stamp),
    /// Not confirmed yet, but still valid: try again at this reading.
    Retry(Stamp),
    /// It is lost now, for this reason.
    Lost(Why),
    /// It was already released or lost.
    Gone,
}

impl Hold {
    /// A lease granted by a round sent at `t0`, valid until `valid_until`.
    pub fn new(spec: &Spec, t0: Stamp, valid_until: Stamp) -> Hold {
        let opts = &spec.opts;
        Hold {
            valid_until,
            ttl: opts.ttl,
            lost: false,
            why: None,
            unconfirmed: None,
            released: false,
            renewals: 0,
            auto_renew: opts.auto_renew,
            retry_delay: opts.retry_delay,
            max_hold: opts.max_hold,
            hold_until: opts.max_hold.map(|h| t0 + h),
            n: spec.n,
            quorum: spec.quorum,
        }
    }

    /// Whether it is held at `now`: not released, not lost, within the validity.
    pub fn is_held(&self, now: Stamp) -> bool {
        !self.lost && !self.released && now < self.valid_until
    }

    /// After a grant or renewal at `t0`: a third of the lease on, to renew; or, without
    /// renewal, the end of the validity.
    pub fn next_at(&self, t0: Stamp) -> Stamp {
        if self.auto_renew {
            t0 + self.ttl / 3
        } else {
            self.valid_until
        }
    }

    /// What the lease needs at `now`.
    pub fn due(&self, now: Stamp) -> Due {
        if self.released || self.lost {
            return Due::Forget;
        }
        if now >= self.valid_until {
            return Due::RanOut(self.ran_out());
        }
        if !self.auto_renew {
            return Due::At(self.valid_until);
        }
        let ttl = match self.hold_until {
            Some(end) => self.ttl.min(end.since(now)),
            None => self.ttl,
        };
        if ttl < MIN_TTL {
            return Due::At(self.valid_until);
        }
        Due::Renew(ttl)
    }

    /// Applies the answers to an extension sent at `t0` with `ttl`, at `now`: a renewal counts
    /// only if a quorum confirmed it before the current validity ran out. `set_ttl` makes
    /// `ttl` the one later renewals ask for (a user's extend).
    pub fn extended(
        &mut self,
        t0: Stamp,
        ttl: Duration,
        tally: &Tally,
        now: Stamp,
        set_ttl: bool,
    ) -> Extended {
        let (n, quorum) = (self.n, self.quorum);
        if self.released || self.lost {
            return Extended::Gone;
        }
        let new_deadline = t0 + ttl.saturating_sub(drift(ttl));
        if tally.yes >= quorum && now < self.valid_until && now < new_deadline {
            self.valid_until = new_deadline;
            if set_ttl {
                self.ttl = ttl;
            }
            self.renewals += 1;
            self.unconfirmed = None;
            return Extended::Renewed(self.next_at(t0));
        }
        // Nodes that said "not yours" can never confirm: past n - quorum of them, no renewal
        // can succeed, so the loss is reported now rather than at the validity deadline. A
        // node that refuses the connection may be restarting with the key on disk: it is
        // asked again within the validity, like a slow one.
        if tally.refused > n - quorum || now >= self.valid_until {
            let (reason, why) = if tally.refused > n - quorum {
                match refusal(tally) {
                    LossReason::AnotherOwner => (
                        LossReason::AnotherOwner,
                        "another owner has it (a renewal was refused)",
                    ),
                    _ => (
                        LossReason::Gone,
                        "it was gone from Redis when it was renewed (expired or deleted)",
                    ),
                }
            } else if tally.down > n - quorum {
                (
                    LossReason::NodesDown,
                    "too many of its nodes are down to renew it",
                )
            } else {
                (
                    LossReason::ValidityRanOut,
                    "its validity ran out before a quorum confirmed a renewal",
                )
            };
            return Extended::Lost(Why::new(reason, why, tally.reports.clone()));
        }
        self.unconfirmed = Some(tally.reports.clone());
        let retry = self
            .retry_delay
            .min(self.valid_until.since(now) / 3)
            .max(Duration::from_millis(1));
        Extended::Retry((now + retry).min(self.valid_until))
    }

    /// Why a lease whose validity ran out without a refused renewal was lost, and what the
    /// nodes said to the last renewal.
    pub(crate) fn ran_out(&self) -> Why {
        // The last renewal before max_hold is cut to end with it (less the drift).
        if self
            .hold_until
            .is_some_and(|end| self.valid_until + drift(self.ttl) >= end)
        {
            let hold = self.max_hold.unwrap_or_default().as_millis();
            let why = format!("its max_hold of {hold} ms ran out");
            Why::new(LossReason::MaxHold, why, Vec::new())
        } else if !self.auto_renew {
            let why = "its TTL ran out (auto-renew is off)";
            Why::new(LossReason::ValidityRanOut, why, Vec::new())
        } else if let Some(nodes) = &self.unconfirmed {
            let why = "its validity ran out before a quorum confirmed a renewal";
            Why::new(LossReason::ValidityRanOut, why, nodes.clone())
        } else {
            let why = "its validity ran out before it was renewed (the process or its renew \
                       thread was held up)";
            Why::new(LossReason::ValidityRanOut, why, Vec::new())
        }
    }

    /// Why a lease that is lost (or whose validity ran out) was lost.
    pub(crate) fn why_lost(&self) -> Why {
        self.why.clone().unwrap_or_else(|| self.ran_out())
    }

    /// Marks it lost for `why`; `false` when it already was lost or released.
    pub fn lose(&mut self, why: Why) -> bool {
        if self.lost || self.released {
            return false;
        }
        self.lost = true;
        self.why = Some(why);
        true
    }

    /// Marks it released; at `now`, an error when it already was, else why it had been lost
    /// before (if it had).
    pub fn release(&mut self, now: Stamp) -> Result<Option<Why>, AlreadyReleased> {
        if std::mem::replace(&mut self.released, true) {
            return Err(AlreadyReleased);
        }
        Ok((self.lost || now >= self.valid_until).then(|| self.why_lost()))
    }
}

/// A lease released a second time.
#[derive(Debug, PartialEq)]
pub struct AlreadyReleased;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lock::Keys;
    use crate::options::MutexOptions;

    const MS: Duration = Duration::from_millis(1);

    use crate::lock::proto::testing::N;

    fn at(ms: u64) -> Stamp {
        Stamp::from_micros(ms * 1000)
    }

    /// A hold of a 300 ms lease on `n` nodes, granted by a round sent at 0 and valid until
    /// 290 ms.
    fn hold(n: usize, opts: MutexOptions) -> Hold {
        let spec = Spec::new(
            Arc::new(Keys::new(b"job")),
            opts.with_ttl(300 * MS),
            50 * MS,
            n,
        )
        .expect("valid options");
        Hold::new(&spec, at(0), at(290))
    }

    fn tally(outcomes: &[NodeOutcome]) -> Tally {
        let mut t = Tally::default();
        for o in outcomes {
            t.push(&N("n"), o.clone());
        }
        t
    }

    fn taken() -> NodeOutcome {
        NodeOutcome::Taken {
            holder: b"other".to_vec(),
            pttl_ms: 100,
        }
    }

    /// Held until the validity runs out; renewed a third of the lease after each grant.
    #[test]
    fn it_is_held_within_its_validity_and_renewed_at_a_third() {
        let h = hold(1, MutexOptions::default());
        assert!(h.is_held(at(289)) && !h.is_held(at(290)));
        assert_eq!(h.next_at(at(0)), at(100));
        assert_eq!(h.due(at(100)), Due::Renew(300 * MS));
        assert!(matches!(h.due(at(290)), Due::RanOut(_)));
        // Without renewal: looked at again when the validity ends.
        let h = hold(1, MutexOptions::default().with_auto_renew(false));
        assert_eq!(h.next_at(at(0)), at(290));
        assert_eq!(h.due(at(100)), Due::At(at(290)));
        assert_eq!(h.ran_out().text, "its TTL ran out (auto-renew is off)");
    }

    /// A renewal counts when a quorum confirmed it before the current validity ran out; the
    /// new validity counts from when it was sent.
    #[test]
    fn a_renewal_a_quorum_confirmed_in_time_extends_the_validity() {
        let mut h = hold(3, MutexOptions::default());
        let t = tally(&[NodeOutcome::Ok, NodeOutcome::Ok, taken()]);
        assert_eq!(
            h.extended(at(100), 300 * MS, &t, at(110), false),
            Extended::Renewed(at(200))
        );
        assert_eq!(h.valid_until, at(100) + (300 * MS - drift(300 * MS)));
        assert_eq!(h.renewals, 1);
        // Confirmed only after the validity ran out: not a renewal, lost.
        let mut h = hold(3, MutexOptions::default());
        let t = tally(&[NodeOutcome::Ok, NodeOutcome::Ok, NodeOutcome::Ok]);
        assert!(matches!(
            h.extended(at(100), 300 * MS, &t, at(290), false),
            Extended::Lost(_)
        ));
    }

    /// Too few confirmations with time left: try again soon, within the validity.
    #[test]
    fn too_few_confirmations_with_time_left_try_again() {
        let mut h = hold(3, MutexOptions::default().with_retry_delay(50 * MS));
        let t = tally(&[NodeOutcome::Ok, NodeOutcome::Unreachable("down".into())]);
        assert_eq!(
            h.extended(at(100), 300 * MS, &t, at(110), false),
            Extended::Retry(at(160))
        );
        assert!(h.unconfirmed.is_some());
        assert!(h.is_held(at(200)));
    }

    /// More than `n − quorum` nodes that say "not ours" end it at once, with the reason.
    #[test]
    fn refusals_beyond_a_minority_lose_it_at_once() {
        let mut h = hold(3, MutexOptions::default());
        let t = tally(&[taken(), taken(), NodeOutcome::Ok]);
        match h.extended(at(100), 300 * MS, &t, at(110), false) {
            Extended::Lost(why) => {
                assert_eq!(why.text, "another owner has it (a renewal was refused)");
                assert_eq!(why.reason, LossReason::AnotherOwner);
                assert_eq!(why.nodes.len(), 3);
            }
            other => panic!("{other:?}"),
        }
        let mut h = hold(1, MutexOptions::default());
        let t = tally(&[NodeOutcome::Missing]);
        match h.extended(at(100), 300 * MS, &t, at(110), false) {
            Extended::Lost(why) => {
                assert_eq!(
                    why.text,
                    "it was gone from Redis when it was renewed (expired or deleted)"
                );
                assert_eq!(why.reason, LossReason::Gone);
            }
            other => panic!("{other:?}"),
        }
    }

    /// `max_hold` cuts the last renewal to end with it, then lets it run out.
    #[test]
    fn max_hold_ends_renewal() {
        let h = hold(1, MutexOptions::default().with_max_hold(Some(400 * MS)));
        assert_eq!(h.due(at(100)), Due::Renew(300 * MS));
        assert_eq!(h.due(at(250)), Due::Renew(150 * MS));
        // Less than the shortest TTL left: nothing more to renew.
        let mut h = hold(1, MutexOptions::default().with_max_hold(Some(400 * MS)));
        h.valid_until = at(398);
        assert_eq!(h.due(at(395)), Due::At(at(398)));
        assert_eq!(h.ran_out().text, "its max_hold of 400 ms ran out");
        assert_eq!(h.ran_out().reason, LossReason::MaxHold);
    }

    /// Released once; a release after the loss says why it was lost; lost or released, it is
    /// forgotten and no renewal counts.
    #[test]
    fn release_and_loss_end_it_once() {
        let mut h = hold(1, MutexOptions::default());
        assert_eq!(h.release(at(10)), Ok(None));
        assert_eq!(h.release(at(11)), Err(AlreadyReleased));
        assert_eq!(h.due(at(12)), Due::Forget);
        let t = tally(&[NodeOutcome::Ok]);
        assert_eq!(
            h.extended(at(12), 300 * MS, &t, at(13), false),
            Extended::Gone
        );
        let mut h = hold(1, MutexOptions::default());
        let gone = Why::new(LossReason::Gone, "gone", Vec::new());
        assert!(h.lose(gone.clone()));
        assert!(!h.lose(Why::new(LossReason::Gone, "again", Vec::new())));
        assert!(!h.is_held(at(10)));
        assert_eq!(h.release(at(10)), Ok(Some(gone)));
        // Released after the validity ran out: it had expired.
        let mut h = hold(1, MutexOptions::default().with_auto_renew(false));
        let why = h.release(at(300)).unwrap().unwrap();
        assert_eq!(why.text, "its TTL ran out (auto-renew is off)");
        assert_eq!(why.reason, LossReason::ValidityRanOut);
    }

    /// A user's extend with another TTL makes later renewals ask for it.
    #[test]
    fn a_users_extend_sets_the_ttl_of_later_renewals() {
        let mut h = hold(1, MutexOptions::default());
        let t = tally(&[NodeOutcome::Ok]);
        let _ = h.extended(at(50), 600 * MS, &t, at(51), true);
        assert_eq!(h.ttl, 600 * MS);
        assert_eq!(h.due(at(300)), Due::Renew(600 * MS));
    }
}
