//! The fence write-back of a round that several nodes granted with different counters.
//!
//! The lock's fence is the largest counter among the granting nodes that answered. For it to
//! stay below every later grant's, a quorum of nodes must hold a counter at least this large:
//! any later grant needs a quorum, which shares a node with this one, whose `INCR` then
//! returns more. The nodes that returned the fence hold it already; the others are raised to
//! it (`counter = max(counter, fence)`) until enough of them confirmed.
//!
//! The write-back goes to every node that did not return the fence: those that returned
//! less, and also those that refused or have not answered yet (behind their request, on the
//! same connection). A counter at or above the fence is what counts, granted or not, so the
//! write-back ends with its first confirmations, at its quorum, rather than with particular
//! nodes; the slower nodes still run it, off the caller's path. Nodes whose answer to the
//! round was a transport error are left out: a new connection's time would be the caller's.

use super::Spec;
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

    /// The request: raise the lock's fence counter to at least the fence.
    pub(crate) fn call(&self, spec: &Spec) -> Call {
        Call::new(
            &scripts::FENCE_MAX,
            &[&spec.keys.fence],
            &[self.fence.to_string().as_bytes()],
        )
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
    /// a quorum.
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
}
