//! The fence write-back of a round that several nodes granted with different counters.
//!
//! The lock's fence is the largest counter among the granting nodes that answered. For it to
//! stay below every later grant's, a quorum of nodes must hold a counter at least this large
//! in a way that no later grant can get around: any later grant needs a quorum, which shares
//! a node with this one, whose `INCR` then returns more. The nodes that returned the fence
//! hold it already; the others are raised to it (`counter = max(counter, fence)`) until
//! enough of them confirmed.
//!
//! **What a confirmation must mean.** Raising a counter is not enough: a node may be held by
//! a concurrent round B that has already run its `INCR` there with the old counter, while B's
//! requests to other nodes are still on their way (delayed in the network, or behind a frozen
//! server). Were such a node counted, a write-back confirmed there and lost on one of our
//! granting nodes would let us return a fence that too few nodes hold where it matters: after
//! our release, B's delayed requests reach our granting nodes, and B is granted with a fence
//! below ours (replayed on three servers with counters 10/3/3: we returned 11, B got 5). So
//! the write-back script confirms (answers 1) only where the lock key is empty, holds a
//! release's hand-off value, or holds our token, and answers 0 elsewhere (still raising the
//! counter, which is harmless). Where it confirms, no other round can still be granted with
//! an `INCR` that ran there before the write-back: such a round stored its token there with
//! that `INCR`, and the key no longer holds it, so that round was undone (never granted),
//! released or expired (granted, if at all, before our grant). Every `INCR` there after the
//! write-back returns more than the fence. A node that granted this round holds our token, so
//! it confirms; so does a node whose answer is still to come behind the write-back on its
//! connection, exactly when its late answer was a grant.
//!
//! The write-back goes to every node that did not return the fence (but for those the round
//! could not reach), so it ends with its first confirmations, at its quorum, rather than with
//! particular nodes; the slower nodes still run it, off the caller's path. The simulator's
//! negative control plugs the old rule back in (any answer is a confirmation:
//! [`Controls::fence_counts_refusing`]), and its checker must catch a fence that goes back.

use redis::Value;

use super::{Controls, Spec};
use crate::lock::scripts::{self, Call};

/// A fence write-back in flight: counted answer by answer.
pub(crate) struct Raise {
    fence: u64,
    quorum: usize,
    /// How many nodes are known to hold the fence: those that returned it, and those that
    /// confirmed the write-back.
    held: usize,
    /// Nodes the write-back went to whose answer has not come.
    waiting: Vec<usize>,
}

impl Raise {
    /// The write-back a round of `nodes` nodes needs, whose `granted` nodes (at least a
    /// quorum) returned these counters, and the nodes to send it to: all others but the
    /// `unreachable`. `None` when a quorum returned the largest counter (every counter
    /// agrees, in the common case): nothing is to be written.
    pub(crate) fn new(
        granted: &[(usize, u64)],
        nodes: usize,
        unreachable: &[usize],
        quorum: usize,
    ) -> Option<(Raise, Vec<usize>)> {
        let fence = granted.iter().map(|(_, f)| *f).max()?;
        let holds = |i: usize| granted.iter().any(|(g, f)| *g == i && *f == fence);
        let held = (0..nodes).filter(|&i| holds(i)).count();
        if held >= quorum {
            return None;
        }
        let to: Vec<usize> = (0..nodes)
            .filter(|&i| !holds(i) && !unreachable.contains(&i))
            .collect();
        let raise = Raise {
            fence,
            quorum,
            held,
            waiting: to.clone(),
        };
        Some((raise, to))
    }

    /// The request: raise the lock's fence counter to at least the fence, and confirm where
    /// the lock key is empty, a hand-off's, or `token`'s.
    pub(crate) fn call(&self, spec: &Spec, token: &[u8]) -> Call {
        Call::new(
            &scripts::FENCE_MAX,
            &[&spec.keys.fence, &spec.keys.lock],
            &[self.fence.to_string().as_bytes(), token],
        )
    }

    /// Whether a node's reply to the write-back is a confirmation that counts: 1.
    pub(crate) fn confirms(reply: Option<&Value>, controls: Controls) -> bool {
        match reply {
            Some(Value::Int(1)) => true,
            Some(_) => controls.fence_counts_refusing,
            None => false,
        }
    }

    /// Counts node `i`'s answer: `ok` when it confirmed. An answer of a node not asked, or
    /// one already counted, changes nothing.
    pub(crate) fn answer(&mut self, i: usize, ok: bool) {
        if let Some(at) = self.waiting.iter().position(|w| *w == i) {
            self.waiting.swap_remove(at);
            self.held += usize::from(ok);
        }
    }

    /// Whether the answers so far decide the write-back: a quorum holds the fence, or too
    /// few answers are left to make one.
    pub(crate) fn decided(&self) -> bool {
        self.held >= self.quorum || self.held + self.waiting.len() < self.quorum
    }

    /// The fence, once a quorum holds it.
    pub(crate) fn fence(&self) -> Option<u64> {
        (self.held >= self.quorum).then_some(self.fence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing is written when a quorum returned the largest counter.
    #[test]
    fn a_quorum_at_the_largest_counter_writes_nothing() {
        assert!(Raise::new(&[(0, 7), (1, 7), (2, 7)], 5, &[], 3).is_none());
        assert!(Raise::new(&[(0, 7), (1, 7), (2, 7), (3, 4)], 5, &[], 3).is_none());
        assert!(Raise::new(&[(0, 7)], 1, &[], 1).is_none());
    }

    /// The write-back goes to every node that did not return the fence, granting or not, but
    /// for those the round could not reach, and ends with the first confirmations that make
    /// a quorum (what a node confirms is the script's to say: see [`Raise::confirms`]).
    #[test]
    fn it_goes_to_every_other_node_and_ends_at_its_quorum() {
        // Of seven nodes, 0, 1 and 3 granted (0 with the largest counter), 2 refused, 4 has
        // not answered, 5 and 6 could not be reached.
        let (mut raise, to) = Raise::new(&[(0, 9), (1, 3), (3, 3)], 7, &[5, 6], 4).unwrap();
        assert_eq!(to, [1, 2, 3, 4]);
        assert!(!raise.decided());
        raise.answer(4, true);
        raise.answer(4, true); // counted once
        raise.answer(0, true); // not asked
        assert!(!raise.decided());
        assert_eq!(raise.fence(), None);
        raise.answer(2, true);
        assert!(!raise.decided());
        raise.answer(1, true);
        assert!(raise.decided());
        assert_eq!(raise.fence(), Some(9));
    }

    /// With too few answers left to make a quorum, it is decided, and holds no fence.
    #[test]
    fn too_few_confirmations_left_decide_it_without_a_fence() {
        let (mut raise, to) = Raise::new(&[(0, 9), (1, 3), (2, 3)], 3, &[], 2).unwrap();
        assert_eq!(to, [1, 2]);
        raise.answer(1, false);
        assert!(!raise.decided());
        raise.answer(2, false);
        assert!(raise.decided());
        assert_eq!(raise.fence(), None);
    }

    /// Only a reply of 1 confirms; the old rule, which the simulator's negative control plugs
    /// back in, took any reply for a confirmation.
    #[test]
    fn only_a_one_confirms_unless_the_old_rule_is_plugged_in() {
        let right = Controls::RIGHT;
        assert!(Raise::confirms(Some(&Value::Int(1)), right));
        assert!(!Raise::confirms(Some(&Value::Int(0)), right));
        assert!(!Raise::confirms(None, right));
        let old = Controls {
            fence_counts_refusing: true,
            ..right
        };
        assert!(Raise::confirms(Some(&Value::Int(0)), old));
        assert!(!Raise::confirms(None, old));
    }
}
