//! One call that takes the lock, as one machine from its first round to its result: it makes
//! each round, holds it while the driver hands it the answers, gives the verdict, and says
//! what the call does next. The blocking driver (`lock/acquire.rs` with `lock/wait.rs`) and
//! the simulator only ferry between it and their networks: which id the call announces itself
//! by, where a grant takes that announcement back, when a call that gives up withdraws it,
//! and what a refused round leads to are decided here, once.

use std::time::Duration;

use super::acquisition::{Acquisition, Then};
use super::round::{AcquireRound, Grant, Next, Refused, Requests};
use super::spec::Spec;
use crate::lock::clock::Stamp;

/// How many waits one announcement covers. A round that finds the call's standing
/// announcement alive on every node until the round after its next wait has run does not
/// renew it: about two rounds of three skip the announcement's commands, most of what a
/// refused round costs the server (`TIME`, `ZADD`, `ZRANGE`, `PEXPIREAT` of the seven a
/// waited mutex round runs), so a thread that waits long costs Redis about a third less. The price is
/// paid only for a waiter that dies without withdrawing: its announcement outlives it by up
/// to this many waits (2 s each at the default cap), during which releases keep their
/// hand-off window for it and new readers queue behind it, as they did for one wait before.
/// Announcements are liveness, never safety: no grant depends on one.
const ANNOUNCE_WAITS: u32 = 4;

/// The state of one acquisition call: the policy across its rounds, the id it announces itself
/// by, and the round in flight.
pub struct AcquireCall {
    policy: Acquisition,
    /// The id this call announces itself by while it waits: fixed by its first round that may
    /// wait or has waited, so that every announcement and every withdrawal of the call names
    /// the same waiter.
    waiter: Option<Vec<u8>>,
    /// The round in flight.
    round: Option<AcquireRound>,
    /// When the last round began (time since the call began).
    started: Duration,
    /// How long the round in flight announces the call for (zero: it does not).
    announcing: Duration,
    /// Until when (time since the call began) the call's announcement is known to be alive
    /// on every node: a refused round announced it there and every node refused it (a node
    /// that granted had it taken back with the grant's undo; one that did not answer may
    /// not have it).
    announced_until: Option<Duration>,
}

/// What became of a round.
pub enum Verdict {
    /// The lock is held: the lease is made from `grant`. With `withdraw`, the call's
    /// announcement is taken back on those nodes, in the background (see
    /// [`Grant::withdraw_on`]).
    Held {
        /// The round's grant.
        grant: Grant,
        /// Where to take the call's announcement back.
        withdraw: Option<Withdraw>,
    },
    /// Not held: the round's undo goes where `refused` says; then the driver asks the call
    /// what comes next ([`AcquireCall::after`]).
    Refused {
        /// Where the round's undo goes.
        refused: Box<Refused>,
        /// What the call does next, once the undo is sent.
        next: Next,
    },
}

/// Where to take a call's announcement back, and by which id.
pub struct Withdraw {
    /// The call's waiter id.
    pub id: Vec<u8>,
    /// The nodes.
    pub nodes: Vec<usize>,
}

impl AcquireCall {
    /// A call that gives up at `deadline` after it began (`None`: never), riding over an outage
    /// for `connect_timeout`.
    pub fn new(spec: &Spec, deadline: Option<Duration>, connect_timeout: Duration) -> AcquireCall {
        AcquireCall {
            policy: Acquisition::new(spec, deadline, connect_timeout),
            waiter: None,
            round: None,
            started: Duration::ZERO,
            announcing: Duration::ZERO,
            announced_until: None,
        }
    }

    /// Begins a round `started` into the call, with `token`, the lease clock read at `t0`
    /// just before the round is sent. `will_wait`: for a round sent behind a wait, whether
    /// the call may wait after it, as the wait's [`Then::Wait`] said; otherwise the call's
    /// deadline decides. `id`: the id to announce the call by, should this be its first round
    /// that needs one (`None`: the round's token). Returns what the round sends.
    pub fn begin(
        &mut self,
        spec: &Spec,
        token: Vec<u8>,
        t0: Stamp,
        started: Duration,
        will_wait: Option<bool>,
        id: Option<&[u8]>,
    ) -> Requests {
        let will_wait = will_wait.unwrap_or_else(|| self.policy.will_wait(started));
        let waited = (self.policy.waited, self.policy.woken());
        // A round that will not wait and comes after no wait announces nothing: it goes
        // without the waiter's arguments.
        let waiter: &[u8] = match will_wait || waited.0 {
            true => self
                .waiter
                .get_or_insert_with(|| id.unwrap_or(&token).to_vec()),
            false => b"",
        };
        // A round sent behind a wait runs when the wait ends (at most `block` from now), and
        // the next one, which may renew, runs at most another `block` later: the standing
        // announcement must last past both, and the margin `announce_for` adds. `until` is
        // counted from when the announcing round was sent, before it ran: on the safe side.
        let block = self.policy.announce_block();
        let ahead = match spec.controls.announcement_forgets_its_wait {
            false => block,
            true => Duration::ZERO,
        };
        let standing = self
            .announced_until
            .is_some_and(|until| until >= started + ahead + spec.announce_for(block));
        let full = match will_wait {
            true => spec.announce_for(block * ANNOUNCE_WAITS),
            false => Duration::ZERO,
        };
        // Alive through the next wait and the round after: not renewed (see
        // `ANNOUNCE_WAITS`); but the undo of a round that took it back puts it back whole.
        // Only after a wait: a round that has not waited announces.
        let announce = match standing && waited.0 {
            true => Duration::ZERO,
            false => full,
        };
        self.announcing = announce;
        let (round, sent) = AcquireRound::new(spec, token, t0, waited, (announce, full), waiter);
        self.round = Some(round);
        self.started = started;
        sent
    }

    /// The round in flight: the driver hands it each node's answer, the nodes it left
    /// unread, and the fence write-back's answers.
    ///
    /// # Panics
    ///
    /// When no round is in flight: a driver calls [`begin`](Self::begin) first.
    pub fn round(&mut self) -> &mut AcquireRound {
        self.round.as_mut().expect("a round is in flight")
    }

    /// The round in flight is over (its answers in, its fence write-back decided): the verdict
    /// on the lease clock's reading `now`.
    ///
    /// # Panics
    ///
    /// When no round is in flight.
    pub fn finish(&mut self, now: Stamp) -> Verdict {
        let round = self.round.take().expect("a round is in flight");
        match round.finish(now, self.policy.announced()) {
            Ok(mut grant) => {
                let withdraw = match &self.waiter {
                    Some(id) if !grant.withdraw_on.is_empty() => Some(Withdraw {
                        id: id.clone(),
                        nodes: std::mem::take(&mut grant.withdraw_on),
                    }),
                    _ => None,
                };
                Verdict::Held { grant, withdraw }
            }
            Err((refused, next)) => {
                self.announced_until = match refused.refused_everywhere {
                    false => None,
                    true if self.announcing.is_zero() => self.announced_until,
                    true => Some(self.started + self.announcing),
                };
                Verdict::Refused { refused, next }
            }
        }
    }

    /// What the call does after its last round was refused with `next` and that round's undo
    /// was sent, `elapsed` into the call; `random` is a fresh random number (it picks the
    /// node to wait on and spreads pauses out).
    pub fn after(&mut self, next: Next, elapsed: Duration, random: u64) -> Then {
        self.policy.after(next, self.started, elapsed, random)
    }

    /// The round in flight went behind a wait whose connection broke: it may have run, and
    /// its undo could not follow it. It is dropped; its token is returned with the lease
    /// clock's reading until which a clean-up of it is worth sending.
    ///
    /// # Panics
    ///
    /// When no round is in flight.
    pub fn abandon(&mut self) -> (Vec<u8>, Stamp) {
        let round = self.round.take().expect("a round is in flight");
        (round.token().to_vec(), round.clean_until())
    }

    /// The id to withdraw the call's announcement by on every node as it ends without the
    /// lock (see [`Acquisition::announced`]): none when no refused round announced it.
    pub fn withdraw_on_giving_up(&self) -> Option<&[u8]> {
        self.waiter.as_deref().filter(|_| self.policy.announced())
    }

    /// Whether the call has waited for a release.
    pub(crate) fn has_waited(&self) -> bool {
        self.policy.waited
    }

    /// A wait ended: by a wake-up signal it took (`woken`), or as it ran out or was ended
    /// early (see [`Acquisition::wait_ended`]).
    pub fn wait_ended(&mut self, woken: bool) {
        self.policy.wait_ended(woken);
    }

    /// Keeps every wait short: the caller checks for an interrupt only when a wait ends
    /// (see [`Acquisition::keep_waits_short`]).
    pub(crate) fn keep_waits_short(&mut self) {
        self.policy.keep_waits_short();
    }

    /// The pause after a wait whose connection broke, `left` of it left.
    pub fn pause_after_broken_wait(&self, left: Duration, random: u64) -> Duration {
        self.policy.pause_after_broken_wait(left, random)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lock::Keys;
    use crate::lock::proto::testing::N;
    use crate::options::MutexOptions;
    use crate::wire::Answer;
    use redis::Value;

    fn spec(n: usize) -> Spec {
        let keys = Arc::new(Keys::new(b"job"));
        Spec::new(keys, MutexOptions::default(), Duration::from_millis(250), n)
            .expect("valid options")
    }

    fn taken() -> Answer {
        Ok(vec![Ok(Value::Array(vec![
            Value::Int(0),
            Value::Int(10_000),
            Value::BulkString(b"other".to_vec()),
        ]))])
    }

    fn granted() -> Answer {
        Ok(vec![Ok(Value::Int(7))])
    }

    fn t(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// The first round that may wait fixes the call's id: a later round announces by it, not
    /// by its own token, and a call that gives up after a refusal withdraws by it.
    #[test]
    fn a_call_announces_and_withdraws_by_one_id() {
        let spec = spec(1);
        let mut call = AcquireCall::new(&spec, Some(t(1_000)), t(5_000));
        let at = Stamp::from_micros(0);
        call.begin(&spec, b"first".to_vec(), at, t(0), None, None);
        call.round().answer(0, &N("n"), &taken());
        let Verdict::Refused { next, .. } = call.finish(at) else {
            panic!("granted though taken");
        };
        let then = call.after(next, t(1), 0);
        assert!(matches!(then, Then::Wait { .. }), "{then:?}");
        assert_eq!(call.withdraw_on_giving_up(), Some(&b"first"[..]));
        call.begin(&spec, b"second".to_vec(), at, t(2), None, None);
        call.round().answer(0, &N("n"), &granted());
        let Verdict::Held { grant, withdraw } = call.finish(at) else {
            panic!("refused though granted");
        };
        assert_eq!(grant.token, b"second");
        // A waited round's grant takes its announcement back itself.
        assert!(withdraw.is_none());
    }

    /// A round after a wait renews the announcement only when the standing one may end
    /// before the round after its next wait: every node refused the round that announced, so
    /// every node has it. A node that did not answer may not have it: the next round renews.
    #[test]
    fn an_announcement_covers_several_waits_while_every_node_has_it() {
        let spec = spec(3);
        let mut call = AcquireCall::new(&spec, None, t(5_000));
        call.keep_waits_short();
        let at = Stamp::from_micros(0);
        let round = |call: &mut AcquireCall, started: u64, answering: usize| {
            call.begin(&spec, b"tok".to_vec(), at, t(started), None, Some(b"id"));
            let announced = call.announcing;
            for i in 0..3 {
                match i < answering {
                    true => call.round().answer(i, &N("n"), &taken()),
                    false => call.round().left_unread(i, &N("n")),
                }
            }
            let Verdict::Refused { next, .. } = call.finish(at) else {
                panic!("granted though taken");
            };
            let then = call.after(next, t(started + 1), 0);
            assert!(matches!(then, Then::Wait { .. }), "{then:?}");
            call.wait_ended(false);
            announced
        };
        // Waits of 250 ms that do not grow: the first announcement, for four of them, lasts
        // until the rounds behind the next two have run.
        let first = round(&mut call, 0, 3);
        assert_eq!(first, spec.announce_for(t(1_000)));
        assert_eq!(round(&mut call, 250, 3), Duration::ZERO);
        assert_eq!(round(&mut call, 500, 2), Duration::ZERO);
        // One node left unread by the last round: renewed, though the time would suffice.
        assert_eq!(round(&mut call, 750, 3), first);
        assert_eq!(round(&mut call, 1_000, 3), Duration::ZERO);
        assert_eq!(round(&mut call, 1_250, 3), Duration::ZERO);
        // The standing one ends before the round after this round's wait has run.
        assert_eq!(round(&mut call, 1_500, 3), first);
    }

    /// A call that will not wait and has not waited goes without an id: it announces nothing,
    /// and has nothing to withdraw.
    #[test]
    fn a_call_that_will_not_wait_has_nothing_to_withdraw() {
        let spec = spec(1);
        let mut call = AcquireCall::new(&spec, Some(Duration::ZERO), t(5_000));
        let at = Stamp::from_micros(0);
        call.begin(&spec, b"only".to_vec(), at, t(0), None, Some(b"id"));
        call.round().answer(0, &N("n"), &taken());
        let Verdict::Refused { next, .. } = call.finish(at) else {
            panic!("granted though taken");
        };
        let then = call.after(next, t(1), 0);
        assert!(matches!(then, Then::Fail(_)), "{then:?}");
        assert_eq!(call.withdraw_on_giving_up(), None);
    }

    /// A grant on a quorum of three takes the announcement back on the node it left unread,
    /// by the id given with the first round that announced.
    #[test]
    fn a_grant_withdraws_by_the_call_id_where_it_did_not_grant() {
        let spec = spec(3);
        let mut call = AcquireCall::new(&spec, None, t(5_000));
        let at = Stamp::from_micros(0);
        call.begin(&spec, b"tok".to_vec(), at, t(0), None, Some(b"id"));
        call.round().answer(0, &N("a"), &granted());
        call.round().answer(1, &N("b"), &granted());
        call.round().left_unread(2, &N("c"));
        let Verdict::Held {
            withdraw: Some(w), ..
        } = call.finish(at)
        else {
            panic!("no withdrawal");
        };
        assert_eq!((&w.id[..], &w.nodes[..]), (&b"id"[..], &[2][..]));
    }
}
