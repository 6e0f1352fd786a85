//! One call that takes the lock, as a state machine over rounds: after each refused round,
//! whether to give up, wait for a release (where, how long), pause, or go again. Times are
//! the caller's monotonic clock, as durations since the call began; randomness comes in as
//! numbers.

use std::time::Duration;

use super::round::Next;
use super::spec::{Kind, Spec};
use crate::error::{NodeOutcome, TryLockError};
use crate::options::FIRST_WAIT;
use crate::options::drift;

/// The state of one call across its rounds.
pub(crate) struct Acquisition {
    /// When the call gives up (`None`: never).
    deadline: Option<Duration>,
    /// The longest wait for a release: the wait cap; with one node, also half of the
    /// lease less the drift, because the round behind the wait is pipelined and its validity
    /// counts from before the wait (a longer wait makes its grant invalid on arrival, and
    /// throws the hand-off away).
    wait_cap: Duration,
    /// The longest the next wait may be: [`FIRST_WAIT`] (or the cap, if lower) at first and
    /// after a wait that a wake-up ended; doubled by each wait that ran out, up to the cap.
    /// So while one holder keeps the lock, a waiter's rounds (each refreshes its
    /// announcement, and looks whether a wake-up was lost) come every few seconds rather
    /// than four times a second; around a release, where a wake-up can be lost, they come
    /// as often as before.
    ceiling: Duration,
    /// Whether waits may grow (see `ceiling`): not for a call whose interrupt check runs
    /// only when a wait ends.
    grows: bool,
    retry_delay: Duration,
    /// How long to ride over an outage.
    connect_timeout: Duration,
    n: usize,
    /// When the rounds began to find too few nodes.
    unreachable_since: Option<Duration>,
    /// Whether the call has waited for a release (only such callers may take a lock that is
    /// being handed off).
    pub(crate) waited: bool,
    /// Whether its last wait was ended by a wake-up signal, until the round after it.
    woken: bool,
    /// Whether the next round goes right behind a wait (see `Then::Wait`).
    pipelines: bool,
    /// Whether a refused round announced the call as a waiter somewhere (a node said
    /// "taken"; such a node stores the announcement, also when too few nodes answered for the
    /// round to count as busy).
    announced: bool,
}

/// What to do after a refused round.
#[derive(Debug)]
pub enum Then {
    /// Return this error.
    Fail(TryLockError),
    /// Block for a release signal on node `node` for at most `block`; `will_wait` says
    /// whether the call may wait again after it. `behind`: the next round goes right behind
    /// the wait on the same connection (with one node: Redis runs it the moment the wait
    /// ends, so a waiter learns of a release and takes the lock in one round trip; its
    /// clock reading comes before the wait, so its validity counts the wait, which is why
    /// the wait is capped there; see `wait_cap`). With several nodes the wait ends first and
    /// the round goes to every node after it.
    Wait {
        /// The node to wait on.
        node: usize,
        /// The longest wait.
        block: Duration,
        /// Whether the call may wait again after it.
        will_wait: bool,
        /// Whether the next round goes right behind the wait.
        behind: bool,
    },
    /// Sleep this long, then go again.
    Pause(Duration),
    /// Go again at once.
    Again,
}

impl Acquisition {
    /// A call that gives up at `deadline` after it began (`None`: never).
    pub(crate) fn new(
        spec: &Spec,
        deadline: Option<Duration>,
        connect_timeout: Duration,
    ) -> Acquisition {
        let ttl = spec.grant_ttl();
        let wait_cap = match spec.n {
            1 => spec.opts.wait_cap.min(ttl.saturating_sub(drift(ttl)) / 2),
            _ => spec.opts.wait_cap,
        };
        Acquisition {
            deadline,
            wait_cap,
            ceiling: FIRST_WAIT.min(wait_cap),
            grows: true,
            retry_delay: spec.opts.retry_delay,
            connect_timeout,
            n: spec.n,
            unreachable_since: None,
            waited: false,
            woken: false,
            // A reader must know whether its wait was woken before its next round is written
            // (see `wait_ended`): it never sends it behind the wait.
            pipelines: spec.n == 1 && spec.kind != Kind::Read,
            announced: false,
        }
    }

    /// A wait ended: by a wake-up signal it took (`woken`), or as it ran out or was ended
    /// early. The round after it says so: a reader woken by a signal that must still yield
    /// to a waiting writer passes the signal on (it may have taken the writer's); one whose
    /// wait ran out creates none.
    pub(crate) fn wait_ended(&mut self, woken: bool) {
        self.woken = woken;
        self.ceiling = match woken || !self.grows {
            true => FIRST_WAIT.min(self.wait_cap),
            false => (self.ceiling * 2).min(self.wait_cap),
        };
    }

    /// Keeps every wait to the first one's length: the caller checks for an interrupt only
    /// when a wait ends.
    pub(crate) fn keep_waits_short(&mut self) {
        self.grows = false;
    }

    /// How long a round announces the call for, as a waiter: the longest wait that may
    /// follow it, and the one after (a round sent behind a wait precedes the wait's end,
    /// which may double the next), plus the node timeout (see [`Spec::announce_for`]).
    pub(crate) fn announce_block(&self) -> Duration {
        match self.grows {
            true => (self.ceiling * 2).min(self.wait_cap),
            false => self.ceiling,
        }
    }

    /// Whether the next round comes right after a wait that a wake-up signal ended.
    pub(crate) fn woken(&self) -> bool {
        self.woken
    }

    /// Whether a refused round of this call announced it as a waiter: a call that gives up
    /// then takes the announcement back on every node (or releases would keep the lock, or a
    /// permit, for a waiter that is gone), and a later grant takes it back where it does not
    /// itself (see `Grant::withdraw_on`). A call whose rounds never reached a node that
    /// refused (a certificate that does not verify, an outage) sends nothing more.
    pub(crate) fn announced(&self) -> bool {
        self.announced
    }

    /// The pause after a wait whose connection broke (no answer, nothing behind it read):
    /// spread out by `random`, and never past the `left` of the wait.
    pub(crate) fn pause_after_broken_wait(&self, left: Duration, random: u64) -> Duration {
        jitter(self.retry_delay, random).min(left)
    }

    /// Whether a round begun at `now` may be followed by a wait (so it announces itself).
    pub(crate) fn will_wait(&self, now: Duration) -> bool {
        self.deadline.is_none_or(|d| d > now)
    }

    /// What to do after a round begun at `started` was refused with `next`, at `now`. `random`
    /// is a fresh random number (it picks the node to wait on and spreads pauses out).
    pub(crate) fn after(
        &mut self,
        next: Next,
        started: Duration,
        now: Duration,
        random: u64,
    ) -> Then {
        self.woken = false;
        self.announced |= match &next {
            Next::Busy { .. } => true,
            Next::Unreachable(e) => e
                .nodes()
                .iter()
                .any(|r| matches!(r.outcome, NodeOutcome::Taken { .. })),
        };
        match next {
            Next::Busy { hint, wake_from } => {
                self.unreachable_since = None;
                let left = self.deadline.map(|d| d.saturating_sub(now));
                if left == Some(Duration::ZERO) {
                    return Then::Fail(TryLockError::WouldBlock);
                }
                let block = [hint, Some(spread(self.ceiling, random)), left]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(self.ceiling);
                self.waited = true;
                if block.is_zero() {
                    return Then::Again;
                }
                Then::Wait {
                    node: pick(&wake_from, self.n, random),
                    block,
                    will_wait: self.deadline.is_none_or(|d| d > now + block),
                    behind: self.pipelines,
                }
            }
            Next::Unreachable(err) => {
                if err.is_misconfiguration() {
                    return Then::Fail(err.into());
                }
                // Ride over a short outage (a restart, a failover) for up to the connect
                // timeout, then report it rather than block forever on a dead Redis.
                let since = *self.unreachable_since.get_or_insert(started);
                let give_up = since + self.connect_timeout;
                let give_up = self.deadline.map_or(give_up, |d| d.min(give_up));
                let pause = jitter(self.retry_delay, random);
                if now + pause > give_up {
                    return Then::Fail(err.into());
                }
                Then::Pause(pause)
            }
        }
    }
}

/// The node to wait on, chosen by `random`: one of `wake_from` (nodes that said "taken"), or
/// any of the `n` when none did.
fn pick(wake_from: &[usize], n: usize, random: u64) -> usize {
    if wake_from.is_empty() {
        (random % n.max(1) as u64) as usize
    } else {
        wake_from[(random % wake_from.len() as u64) as usize]
    }
}

/// A wait's ceiling, shortened by up to a quarter as the high bits of `random` say (none for
/// 0): the waits of threads that began together (a thousand locks taken at once, each with a
/// waiter) run out at different times, so their rounds do not all come at once, each needing
/// a connection of its own, but a few at a time on the client's pooled ones.
fn spread(ceiling: Duration, random: u64) -> Duration {
    let quarter = ceiling.as_nanos() as u64 / 4;
    ceiling - Duration::from_nanos(quarter / 1024 * ((random >> 32) % 1024))
}

/// A duration in `[base/2, base*3/2]` chosen by `random`: retries from many clients spread out.
pub fn jitter(base: Duration, random: u64) -> Duration {
    let half = base / 2;
    let span = base.as_nanos() as u64;
    half + Duration::from_nanos(if span == 0 { 0 } else { random % (span + 1) })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::error::{Error, ErrorKind};
    use crate::lock::Keys;
    use crate::options::MutexOptions;

    const MS: Duration = Duration::from_millis(1);

    fn spec(n: usize, opts: MutexOptions) -> Spec {
        Spec::new(Arc::new(Keys::new(b"job")), opts, 50 * MS, n).expect("valid options")
    }

    fn busy(hint: Option<Duration>, wake_from: Vec<usize>) -> Next {
        Next::Busy { hint, wake_from }
    }

    fn unreachable() -> Next {
        Next::Unreachable(Error::new(
            ErrorKind::NoQuorum,
            "fewer than a quorum answered",
        ))
    }

    /// A busy lock is waited for on a node that said "taken", for at most the holder's
    /// remaining time, the wait cap and the call's time left; the call has waited from then
    /// on (it may take a lock being handed off).
    #[test]
    fn a_busy_lock_is_waited_for_on_a_node_that_said_taken() {
        let s = spec(5, MutexOptions::default());
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        assert!(!call.waited);
        match call.after(busy(Some(70 * MS), vec![3]), MS, 2 * MS, 7) {
            Then::Wait {
                node,
                block,
                will_wait,
                behind,
            } => assert_eq!((node, block, will_wait, behind), (3, 70 * MS, true, false)),
            other => panic!("{other:?}"),
        }
        assert!(call.waited);
        // Capped by the wait cap, and by the time left, after which it will not wait again.
        let mut call = Acquisition::new(&s, Some(100 * MS), 10_000 * MS);
        match call.after(busy(Some(10_000 * MS), vec![0, 1]), MS, 20 * MS, 1) {
            Then::Wait {
                node,
                block,
                will_wait,
                ..
            } => assert_eq!((node, block, will_wait), (1, 80 * MS, false)),
            other => panic!("{other:?}"),
        }
    }

    /// A split vote or a late grant (no holder to wait for) goes again at once; a call whose
    /// time is up gives up with `WouldBlock`.
    #[test]
    fn no_holder_goes_again_and_no_time_left_gives_up() {
        let s = spec(3, MutexOptions::default());
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        assert!(matches!(
            call.after(busy(Some(Duration::ZERO), vec![]), MS, MS, 0),
            Then::Again
        ));
        let mut call = Acquisition::new(&s, Some(10 * MS), 10_000 * MS);
        assert!(matches!(
            call.after(busy(Some(5 * MS), vec![0]), MS, 10 * MS, 0),
            Then::Fail(TryLockError::WouldBlock)
        ));
        assert!(!call.will_wait(10 * MS) && call.will_wait(9 * MS));
    }

    /// Too few nodes answer: the call pauses and goes again for up to the connect timeout
    /// counted from the first such round, then reports the outage.
    #[test]
    fn an_outage_is_ridden_over_for_the_connect_timeout() {
        let s = spec(3, MutexOptions::default().with_retry_delay(10 * MS));
        let mut call = Acquisition::new(&s, None, 100 * MS);
        match call.after(unreachable(), Duration::ZERO, 5 * MS, 0) {
            Then::Pause(p) => assert!((5 * MS..=15 * MS).contains(&p), "{p:?}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            call.after(unreachable(), 60 * MS, 70 * MS, 0),
            Then::Pause(_)
        ));
        match call.after(unreachable(), 90 * MS, 99 * MS, 0) {
            Then::Fail(TryLockError::Error(e)) => assert_eq!(e.kind(), ErrorKind::NoQuorum),
            other => panic!("{other:?}"),
        }
        // A busy round ends the outage: the next one counts from its own start again.
        let _ = call.after(busy(None, vec![0]), 100 * MS, 100 * MS, 0);
        assert!(matches!(
            call.after(unreachable(), 150 * MS, 151 * MS, 0),
            Then::Pause(_)
        ));
    }

    /// With one node, the next round is pipelined behind the wait and its validity counts
    /// from before the wait: a wait longer than the lease would make its grant invalid on
    /// arrival, throwing the hand-off away. So it waits at most half of `ttl − drift`.
    #[test]
    fn a_pipelined_wait_leaves_the_grant_behind_it_valid() {
        let ttl = 200 * MS;
        let s = spec(1, MutexOptions::default().with_ttl(ttl));
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        match call.after(busy(Some(10_000 * MS), vec![0]), MS, MS, 0) {
            Then::Wait { block, .. } => {
                assert!(block <= (ttl - drift(ttl)) / 2, "{block:?}")
            }
            other => panic!("{other:?}"),
        }
        // With several nodes a fresh round follows the wait: the wait cap alone bounds it.
        let s = spec(3, MutexOptions::default().with_ttl(ttl));
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        match call.after(busy(Some(10_000 * MS), vec![0]), MS, MS, 0) {
            Then::Wait { block, .. } => assert_eq!(block, FIRST_WAIT),
            other => panic!("{other:?}"),
        }
    }

    /// Waits that run out double, up to the cap; one that a wake-up ended starts over; a
    /// call that checks for interrupts only between waits keeps them short.
    #[test]
    fn waits_grow_while_nothing_is_released() {
        let s = spec(3, MutexOptions::default());
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        let block = |call: &mut Acquisition| match call.after(busy(None, vec![0]), MS, MS, 0) {
            Then::Wait { block, .. } => block,
            other => panic!("{other:?}"),
        };
        let mut seen = Vec::new();
        for _ in 0..6 {
            seen.push(block(&mut call));
            call.wait_ended(false);
        }
        assert_eq!(
            seen,
            [250, 500, 1000, 2000, 2000, 2000].map(|ms| ms * MS),
            "cap {:?}",
            s.opts.wait_cap
        );
        assert!(call.announce_block() >= s.opts.wait_cap);
        call.wait_ended(true);
        assert_eq!(block(&mut call), FIRST_WAIT);
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        call.keep_waits_short();
        call.wait_ended(false);
        assert_eq!(block(&mut call), FIRST_WAIT);
        assert_eq!(call.announce_block(), FIRST_WAIT);
    }

    /// A reader's round after a wait says whether a wake-up signal ended the wait (it passes
    /// one on only then), so it is never written behind the wait, before anyone knows; and
    /// the "woken" lasts for the round right after the wait only.
    #[test]
    fn a_reader_learns_how_its_wait_ended_before_its_next_round() {
        let mut s = spec(1, MutexOptions::default());
        s.kind = Kind::Read;
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        match call.after(busy(None, vec![0]), MS, MS, 0) {
            Then::Wait { behind, .. } => assert!(!behind, "a reader's round went behind"),
            other => panic!("{other:?}"),
        }
        assert!(!call.woken());
        call.wait_ended(true);
        assert!(call.woken() && call.waited);
        let _ = call.after(busy(None, vec![0]), 2 * MS, 2 * MS, 0);
        assert!(!call.woken(), "woken outlived the round after the wait");
        // A mutex with one node still sends its round behind the wait.
        let s = spec(1, MutexOptions::default());
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        assert!(matches!(
            call.after(busy(None, vec![0]), MS, MS, 0),
            Then::Wait { behind: true, .. }
        ));
    }

    /// Pauses are spread over `[base/2, base*3/2]`.
    #[test]
    fn jitter_spreads_pauses_around_the_base() {
        let base = 100 * MS;
        assert_eq!(jitter(base, 0), 50 * MS);
        assert_eq!(jitter(base, 100_000_000), 150 * MS);
        assert_eq!(jitter(Duration::ZERO, 12345), Duration::ZERO);
    }

    /// A call is announced once a round was refused by a node that said "taken", also when
    /// too few nodes answered for it to count as busy; not by an outage alone.
    #[test]
    fn a_call_is_announced_where_a_node_said_taken() {
        let s = spec(3, MutexOptions::default());
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        call.after(unreachable(), MS, 2 * MS, 1);
        assert!(!call.announced(), "an outage alone");
        let report =
            Error::new(ErrorKind::NoQuorum, "fewer than a quorum answered").with_nodes(vec![
                crate::error::NodeReport {
                    node: "n".into(),
                    outcome: NodeOutcome::Taken {
                        holder: b"other".to_vec(),
                        pttl_ms: 500,
                    },
                },
            ]);
        call.after(Next::Unreachable(report), 3 * MS, 4 * MS, 1);
        assert!(call.announced(), "one node said taken");
        let mut call = Acquisition::new(&s, None, 10_000 * MS);
        call.after(busy(None, vec![0]), MS, 2 * MS, 1);
        assert!(call.announced(), "busy");
    }
}
