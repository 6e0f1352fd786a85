//! The faults of one run, drawn up front from the seed.

use super::view::WorldView;
use super::{Event, World};
use crate::rng::Rng;

/// The longest single node freeze (µs).
pub const MAX_FREEZE: u64 = 1_500_000;

/// One fault, starting at a true time and lasting a while (µs).
// Each variant's doc names its fields; `dur` is always the fault's length (µs).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The node's process is stopped (SIGSTOP): it runs nothing; its clock, the machine's,
    /// keeps going; what arrived meanwhile runs when it continues.
    Freeze { node: usize, dur: u64 },
    /// The node restarts: down for `dur`, then up with its keyspace (`persist`) or empty;
    /// connections and the script cache are gone either way.
    Restart {
        node: usize,
        dur: u64,
        persist: bool,
    },
    /// The client's process is stopped: it runs nothing; its clocks keep going.
    Pause { client: usize, dur: u64 },
    /// The client's machine sleeps: it runs nothing and its monotonic clock stops, while its
    /// boot clock (and everyone else's time) goes on.
    Suspend { client: usize, dur: u64 },
    /// Someone outside the lock empties the node's keyspace at once (an operator's
    /// `FLUSHALL` or `DEL`, an eviction, a failover to a replica that lacked the keys): held
    /// lock keys and the fence counter are gone, while the node keeps running and its
    /// connections stay.
    Flush { node: usize },
}

/// Draws the faults of a run: `count` of them, at times in `0..until`, sorted by time.
///
/// A restart without persistence keeps the node down for longer than one TTL plus the
/// longest network delay (Redlock's rule for a node that restarts without persistence: stay
/// unavailable for at least one TTL): otherwise it could grant a lock that a quorum still
/// holds, and no client could prevent that.
pub fn schedule(
    rng: &mut Rng,
    nodes: usize,
    clients: usize,
    until: u64,
    count: usize,
    ttl: u64,
    max_delay: u64,
) -> Vec<(u64, Fault)> {
    let mut out = Vec::new();
    for _ in 0..count {
        let at = rng.below(until);
        let node = rng.below(nodes as u64) as usize;
        let client = rng.below(clients as u64) as usize;
        let fault = match rng.below(5) {
            0 => Fault::Freeze {
                node,
                dur: rng.range(10_000, MAX_FREEZE),
            },
            1 => Fault::Restart {
                node,
                dur: rng.range(50_000, 500_000),
                persist: true,
            },
            2 => Fault::Restart {
                node,
                dur: ttl + max_delay + rng.range(10_000, 500_000),
                persist: false,
            },
            3 => Fault::Pause {
                client,
                dur: rng.range(10_000, 1_500_000),
            },
            _ => Fault::Suspend {
                client,
                dur: rng.range(10_000, 3_000_000),
            },
        };
        out.push((at, fault));
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

/// Adds `flushes` flushes of random nodes at times in `0..until` to `plan`, drawn after its
/// other faults (so that worlds without flushes keep their draws), and sorts it again.
pub fn add_flushes(
    rng: &mut Rng,
    plan: &mut Vec<(u64, Fault)>,
    nodes: usize,
    until: u64,
    flushes: usize,
) {
    for _ in 0..flushes {
        let at = rng.below(until);
        let node = rng.below(nodes as u64) as usize;
        plan.push((at, Fault::Flush { node }));
    }
    plan.sort_by_key(|(at, _)| *at);
}

/// The longest time any node stays frozen in one go, overlapping freezes merged (µs): how long
/// a request can wait in a frozen node's socket before it runs.
pub fn longest_freeze(plan: &[(u64, Fault)], nodes: usize) -> u64 {
    let mut longest = 0;
    for n in 0..nodes {
        let mut spans: Vec<(u64, u64)> = plan
            .iter()
            .filter_map(|(at, f)| match f {
                Fault::Freeze { node, dur } if *node == n => Some((*at, at + dur)),
                _ => None,
            })
            .collect();
        spans.sort_unstable();
        let mut current: Option<(u64, u64)> = None;
        for (start, end) in spans {
            current = match current {
                Some((s, e)) if start <= e => Some((s, e.max(end))),
                _ => Some((start, end)),
            };
            let (s, e) = current.expect("just set");
            longest = longest.max(e - s);
        }
    }
    longest
}

impl World {
    /// Starts a fault; its end is an event of its own.
    pub(super) fn fault(&mut self, f: Fault) {
        let now = self.now;
        self.log(|| format!("{now} fault {f:?}"));
        match f {
            Fault::Freeze { node, dur } => {
                let n = &mut self.nodes[node];
                n.frozen = true;
                n.frozen_until = n.frozen_until.max(now + dur);
                self.push(now + dur, Event::NodeThaw { node });
            }
            Fault::Restart { node, dur, persist } => {
                let n = &mut self.nodes[node];
                n.down = true;
                n.down_until = n.down_until.max(now + dur);
                n.frozen = false;
                n.life += 1;
                n.backlog.clear();
                n.blocked.clear();
                n.held.clear();
                n.freed.clear();
                n.preloaded.clear();
                n.server.restart(persist);
                // A lost counter starts again at the server's time in µs: above every
                // earlier fence of one node, whose clock does not step back. Over several
                // nodes that holds only while their clocks agree within the outage, and
                // these worlds give their servers unrelated clocks (days apart): there the
                // order of fences is not judged after a loss.
                if !persist && self.nodes.len() == 1 {
                    self.checker.counter_lost = true;
                } else if !persist {
                    self.checker.fences_kept = false;
                }
                for client in 0..self.clients.len() {
                    self.cut(client, node, true);
                }
                self.push(now + dur, Event::NodeUp { node });
            }
            Fault::Flush { node } => {
                let mut view = WorldView {
                    nodes: &mut self.nodes,
                    clients: &self.clients,
                    holders: self.holders.as_deref(),
                };
                self.checker.vanishing(node, now, &mut view);
                self.nodes[node].server.flush_keys();
                if self.nodes.len() == 1 {
                    self.checker.counter_lost = true;
                } else {
                    self.checker.fences_kept = false;
                }
            }
            Fault::Pause { client, dur } | Fault::Suspend { client, dur } => {
                let slot = &mut self.clients[client];
                slot.busy_until = slot.busy_until.max(now + dur);
                if matches!(f, Fault::Suspend { .. }) {
                    slot.suspended_until = slot.suspended_until.max(now + dur);
                    slot.mono.stop(now);
                    self.push(now + dur, Event::ClientGo { client });
                }
            }
        }
    }
}

/// How long a fault lasts (µs).
pub(super) fn fault_len(f: &Fault) -> u64 {
    match f {
        Fault::Freeze { dur, .. }
        | Fault::Restart { dur, .. }
        | Fault::Pause { dur, .. }
        | Fault::Suspend { dur, .. } => *dur,
        Fault::Flush { .. } => 0,
    }
}
