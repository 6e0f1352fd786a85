//! What a flush from outside the lock does to the claims: a holder whose key fewer than a
//! quorum of nodes keep has lost the lock, whether it knows it yet or not (it is *doomed*).

use super::{Checker, View};

impl Checker {
    /// Someone outside the lock is about to empty node `node`'s keyspace at true time `t`:
    /// every claim whose key it holds and that fewer than a quorum of the other nodes keep
    /// until the claim ends is doomed. A node that is down does not count: it may come back
    /// without its keys.
    pub fn vanishing(&mut self, node: usize, t: u64, view: &mut dyn View) {
        let stored: Vec<_> = (0..view.nodes()).map(|i| view.holds(i, t)).collect();
        for (token, _) in &stored[node] {
            if matches!(self.ended.get(token), Some(None)) {
                self.vanished.insert(token.clone());
            }
        }
        for claim in self.claims.values_mut() {
            let here = |i: usize| stored[i].iter().any(|(v, _)| *v == claim.token);
            if claim.end <= t || !here(node) {
                continue;
            }
            claim.flushed = true;
            // As the lease check counts: a node keeps it when it stores the token at least
            // until the claim ends.
            let keeps = |i: usize| {
                stored[i].iter().any(|(v, until)| {
                    *v == claim.token && until.is_none_or(|u| u + 1_000 >= claim.end)
                })
            };
            let kept = (0..view.nodes()).filter(|&i| i != node && keeps(i)).count();
            if kept < self.quorum {
                claim.doomed = true;
            }
        }
    }

    /// How many nodes that are up keep `token` at true time `t` until at least `end`.
    pub(super) fn keeping(&self, token: &[u8], end: u64, t: u64, view: &mut dyn View) -> usize {
        (0..view.nodes())
            .filter(|&i| {
                view.holds(i, t)
                    .iter()
                    .any(|(v, until)| v == token && until.is_none_or(|u| u + 1_000 >= end))
            })
            .count()
    }
}
