//! Clean-ups: a token-checked release that must reach some nodes although the connection it
//! would have gone on is gone — an attempt's grant whose reply was lost to a reset, or the key
//! of a guard that learned it was lost — or the withdrawal of a waiter's announcement on the
//! nodes that did not grant the call that made it. They are sent on fresh connections by the
//! renew thread, again until every node answered or what they remove would have expired
//! anyway.

use std::sync::Arc;
use std::time::Instant;

use super::calls::{release_call, withdraw_calls};
use super::proto::Spec;
use super::proto::cleanup::Tries;
use super::scripts::Call;
use super::token;
use crate::net::{self, Node};

/// One clean-up: a release of one token, or a withdrawal, on some nodes.
pub(crate) struct Cleanup {
    /// The release, with no hand-off window (nobody released the lock on purpose); or the
    /// withdrawal's `ZREM`s. The first one's reply tells whether a node is done.
    pub(crate) calls: Vec<Call>,
    /// The nodes (indices) that have not answered yet.
    pub(crate) nodes: Vec<usize>,
    /// When to send it next.
    pub(crate) at: Instant,
    /// After this the key has expired by itself: nothing is left to remove.
    pub(crate) until: Instant,
    /// When it began: what a node's "missing" means depends on how long after this a try
    /// was sent.
    began: Instant,
    /// When a node is done, and the pause between tries.
    tries: Tries,
}

impl Cleanup {
    /// A clean-up of `token`'s key on `nodes` until `until`, starting now.
    pub(crate) fn new(spec: &Spec, token: &[u8], nodes: Vec<usize>, until: Instant) -> Cleanup {
        Cleanup::of(spec, vec![release_call(spec, token, false)], nodes, until)
    }

    /// The withdrawal of the waiter announcement `id` on `nodes`, until it would have ended
    /// anyway (`until`). A node that has no such announcement yet is asked again for a node
    /// timeout: the request that makes it may still be on its way.
    pub(crate) fn withdraw(spec: &Spec, id: &[u8], nodes: Vec<usize>, until: Instant) -> Cleanup {
        Cleanup::of(spec, withdraw_calls(spec, id), nodes, until)
    }

    fn of(spec: &Spec, calls: Vec<Call>, nodes: Vec<usize>, until: Instant) -> Cleanup {
        let now = Instant::now();
        Cleanup {
            calls,
            nodes,
            at: now,
            until,
            began: now,
            tries: Tries::of(spec),
        }
    }
}

/// Sends every due clean-up in one round (pipelined per node), and returns those that some
/// node has not answered yet while there is time left, each to be tried again later (see
/// [`Tries`] for when a node is done and how long the pause is).
pub(crate) fn run(due: Vec<Cleanup>, nodes: &[Arc<Node>]) -> Vec<Cleanup> {
    let mut calls: Vec<Vec<&Call>> = vec![Vec::new(); nodes.len()];
    for c in &due {
        for &i in &c.nodes {
            calls[i].extend(&c.calls);
        }
    }
    let slices: Vec<&[&Call]> = calls.iter().map(Vec::as_slice).collect();
    let timeout = due.iter().map(|c| c.tries.node_timeout()).max();
    let sent = Instant::now();
    let answers = net::exchange(nodes, &slices, sent + timeout.unwrap_or_default(), None);
    // Each node's replies come in the order its calls were added: clean-up by clean-up.
    let mut next_reply = vec![0usize; nodes.len()];
    let now = Instant::now();
    let mut again = Vec::new();
    for mut c in due {
        let sent_after = sent.saturating_duration_since(c.began);
        c.nodes.retain(|&i| {
            let k = next_reply[i];
            next_reply[i] += c.calls.len();
            let reply = answers[i].as_ref().ok().and_then(|v| v.get(k));
            !c.tries.done(reply, sent_after)
        });
        c.at = now + c.tries.next_pause(token::random());
        if !c.nodes.is_empty() && c.at < c.until {
            again.push(c);
        }
    }
    again
}
