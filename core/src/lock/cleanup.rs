//! Clean-ups: a token-checked release that must reach some nodes although the connection it
//! would have gone on is gone — an attempt's grant whose reply was lost to a reset, or the key
//! of a guard that learned it was lost — or the withdrawal of a waiter's announcement on the
//! nodes that did not grant the call that made it. They are sent on fresh connections by the
//! renew thread, again until every node answered or what they remove would have expired
//! anyway.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::calls::{release_call, withdraw_calls};
use super::proto::Spec;
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
    /// Before this, a node that says the key is missing is asked again: the request being
    /// cleaned up after may still be on its way (a node timeout after it was given up).
    pub(crate) settled_after: Instant,
    /// Each try's per-node timeout.
    pub(crate) node_timeout: Duration,
    /// The base of the pause between tries (jittered).
    pub(crate) retry_delay: Duration,
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
            settled_after: now + spec.node_timeout,
            node_timeout: spec.node_timeout,
            retry_delay: spec.opts.retry_delay,
        }
    }
}

/// Sends every due clean-up in one round (pipelined per node), and returns those that some
/// node has not answered yet while there is time left, each to be tried again later.
///
/// The pause doubles from the retry delay, but never past two thirds of the node timeout (its
/// jitter adds up to half): a node that comes back is cleaned up within one node timeout and
/// one round trip, however long it was gone. What an unreachable node costs meanwhile is one
/// try per node timeout, batched with every other due clean-up.
pub(crate) fn run(due: Vec<Cleanup>, nodes: &[Arc<Node>]) -> Vec<Cleanup> {
    let mut calls: Vec<Vec<&Call>> = vec![Vec::new(); nodes.len()];
    for c in &due {
        for &i in &c.nodes {
            calls[i].extend(&c.calls);
        }
    }
    let slices: Vec<&[&Call]> = calls.iter().map(Vec::as_slice).collect();
    let timeout = due.iter().map(|c| c.node_timeout).max().unwrap_or_default();
    let answers = net::exchange(nodes, &slices, Instant::now() + timeout, None);
    // Each node's replies come in the order its calls were added: clean-up by clean-up.
    let mut next_reply = vec![0usize; nodes.len()];
    let now = Instant::now();
    let mut again = Vec::new();
    for mut c in due {
        let settled = now >= c.settled_after;
        c.nodes.retain(|&i| {
            let k = next_reply[i];
            next_reply[i] += c.calls.len();
            // Released (withdrawn), or another owner's now: done. Gone already: done once the
            // request cleaned up after can no longer arrive behind us.
            match &answers[i] {
                Ok(v) => match v.get(k) {
                    Some(Ok(Value::Int(0))) => !settled,
                    Some(Ok(_)) => false,
                    _ => true,
                },
                Err(_) => true,
            }
        });
        c.retry_delay = (c.retry_delay * 2)
            .min(c.node_timeout * 2 / 3)
            .max(Duration::from_millis(2));
        c.at = now + token::jitter(c.retry_delay);
        if !c.nodes.is_empty() && c.at < c.until {
            again.push(c);
        }
    }
    again
}
