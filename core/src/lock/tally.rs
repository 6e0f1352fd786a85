//! The tally: how the nodes voted on one request of a round, and the quorum rule.

use std::sync::Arc;

use redis::Value;

use super::reply::shown;
use crate::error::{Error, ErrorKind, NodeOutcome, NodeReport, outcome_of};
use crate::net::{Enough, Node};
use crate::wire::{Answer, Failure, NetError};

/// How the nodes voted on one call of a round.
#[derive(Default)]
pub struct Tally {
    /// Nodes that granted or confirmed.
    pub yes: usize,
    /// Nodes that definitely said no: the lock is missing there or another owner has it.
    pub refused: usize,
    /// Of `refused`: nodes where the lock was missing.
    pub(crate) missing: usize,
    /// Nodes that could not be asked or answered with an error.
    pub(crate) failed: usize,
    /// Of `failed`: nodes that refused the connection (down), not merely slow or flaky.
    pub(crate) down: usize,
    /// Nodes whose answer was not waited for: the others' answers decided (counted in none
    /// of the above).
    pub(crate) pending: usize,
    /// Each node's answer, for error reports.
    pub(crate) reports: Vec<NodeReport>,
    /// One underlying failure, for `Error::source`.
    pub(crate) source: Option<NetError>,
    /// Whether every failure so far was one that waiting cannot mend (refused credentials, a
    /// certificate that does not verify); `None` before the first.
    lasting: Option<bool>,
}

/// What the tally needs to know of a node: its name for reports, and whether it follows a
/// failover (a refused connection then does not say the node is down).
pub trait Seat {
    /// The node's name in reports.
    fn name(&self) -> &str;
    /// Whether it follows a failover (a Sentinel master, a cluster's node).
    fn follows_failover(&self) -> bool;
}

impl Seat for Node {
    fn name(&self) -> &str {
        Node::name(self)
    }
    fn follows_failover(&self) -> bool {
        Node::follows_failover(self)
    }
}

impl<T: Seat + ?Sized> Seat for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn follows_failover(&self) -> bool {
        (**self).follows_failover()
    }
}

/// How many of `n` nodes must agree: a majority.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

impl Tally {
    /// Some node failed, and every failure was one that waiting cannot mend: the error to
    /// report at once rather than ride over like an outage.
    pub(crate) fn misconfigured(&self) -> bool {
        self.lasting == Some(true)
    }

    /// The error a caller sees when this round did not succeed: what it tried, its kind
    /// unless one node's own kind says more (see [`Error::from_report`]), and each node's
    /// answer.
    pub(crate) fn into_error(self, what: &str, fallback: ErrorKind) -> Error {
        let misconfigured = self.misconfigured();
        Error::from_report(what, fallback, self.reports, self.source).misconfigured(misconfigured)
    }

    /// Records a node that could not be asked or answered with an error.
    pub(crate) fn fail(&mut self, node: &dyn Seat, e: NetError) {
        self.failed += 1;
        // Only a refused connection says the node is down: a connection dropped after it was
        // established (CLIENT KILL, a proxy) may work again on the next try, and a master
        // behind Sentinel or in a cluster may be replaced by a promoted replica.
        if e.failure() == Failure::Refused && !node.follows_failover() {
            self.down += 1;
        }
        let lasting = matches!(
            e.failure(),
            Failure::Auth | Failure::TlsUnverified | Failure::Unsuitable
        );
        self.lasting = Some(self.lasting.unwrap_or(true) && lasting);
        self.reports.push(NodeReport {
            node: node.name().to_owned(),
            outcome: outcome_of(&e),
        });
        self.source.get_or_insert(e);
    }

    /// Records a node whose answer the round did not wait for (see
    /// [`NodeOutcome::NotWaitedFor`]).
    pub(crate) fn not_waited_for(&mut self, node: &dyn Seat) {
        self.push(node, NodeOutcome::NotWaitedFor);
    }

    pub(crate) fn push(&mut self, node: &dyn Seat, outcome: NodeOutcome) {
        match outcome {
            NodeOutcome::NotWaitedFor => self.pending += 1,
            NodeOutcome::Ok => self.yes += 1,
            NodeOutcome::Missing => {
                self.refused += 1;
                self.missing += 1
            }
            NodeOutcome::Taken { .. } => self.refused += 1,
            NodeOutcome::Error(_) => {
                self.failed += 1;
                self.lasting = Some(false);
            }
            _ => self.failed += 1,
        }
        self.reports.push(NodeReport {
            node: node.name().to_owned(),
            outcome,
        });
    }

    /// Tallies call `j` of a round of scripts that answer 1 (yes), 0 (missing) or -1 (taken).
    ///
    /// With `replicas = Some((k, n))`, call `k` of each node is a `WAIT` that followed call
    /// `j`: a yes counts only if it reported at least `n` replicas.
    pub fn of_ints<S: Seat>(
        nodes: &[S],
        answers: &[Answer],
        j: usize,
        replicas: Option<(usize, u32)>,
    ) -> Tally {
        let mut t = Tally::default();
        for (node, answer) in nodes.iter().zip(answers) {
            match answer.as_ref().map(|values| values.get(j)) {
                Ok(Some(Ok(Value::Int(1)))) => match replicas {
                    Some((k, wanted)) => {
                        let waited = answer.as_ref().ok().and_then(|v| v.get(k));
                        t.push(node, replicas_outcome(waited, wanted))
                    }
                    None => t.push(node, NodeOutcome::Ok),
                },
                Ok(Some(Ok(Value::Int(0)))) => t.push(node, NodeOutcome::Missing),
                Ok(Some(Ok(Value::Int(_)))) => t.push(
                    node,
                    NodeOutcome::Taken {
                        holder: Vec::new(),
                        pttl_ms: -2,
                    },
                ),
                Ok(Some(Ok(other))) => t.push(node, unexpected("reply", &[other])),
                Ok(Some(Err(e))) | Err(e) => t.fail(node, e.clone()),
                // No reply: a round that ended at its quorum leaves the slower nodes'
                // answers empty.
                Ok(None) => t.not_waited_for(node),
            }
        }
        t
    }
}

/// The confirmations of a round of calls of scripts that answer 1 (yes), counted as the
/// answers come in, as [`Tally::of_ints`] counts them: a round of extensions ends once a
/// quorum confirmed each of its calls (the slower nodes still run them).
pub(crate) struct Confirmations<'a> {
    quorum: usize,
    /// Per call `j`: `Some((k, n))` when its yes counts only if the node's `WAIT` (call `k`)
    /// reported at least `n` replicas.
    replicas: &'a [Option<(usize, u32)>],
    yes: Vec<usize>,
    unconfirmed: usize,
}

impl<'a> Confirmations<'a> {
    /// For calls `0..replicas.len()` among `n` nodes.
    pub(crate) fn new(n: usize, replicas: &'a [Option<(usize, u32)>]) -> Confirmations<'a> {
        Confirmations {
            quorum: quorum(n),
            replicas,
            yes: vec![0; replicas.len()],
            unconfirmed: replicas.len(),
        }
    }

    /// Counts one node's answer; whether a quorum has now confirmed every call.
    pub(crate) fn count(&mut self, answer: &Answer) -> Enough {
        if let Ok(values) = answer {
            for (j, yes) in self.yes.iter_mut().enumerate() {
                let confirmed = matches!(values.get(j), Some(Ok(Value::Int(1))))
                    && self.replicas[j].is_none_or(|(k, wanted)| {
                        replicas_outcome(values.get(k), wanted) == NodeOutcome::Ok
                    });
                if *yes < self.quorum && confirmed {
                    *yes += 1;
                    self.unconfirmed -= usize::from(*yes == self.quorum);
                }
            }
        }
        Enough::when(self.unconfirmed == 0)
    }
}

/// What a node's `WAIT` reply means for a write that the node accepted: [`NodeOutcome::Ok`]
/// when at least `wanted` replicas acknowledged it, else why not.
pub(crate) fn replicas_outcome(
    waited: Option<&Result<Value, NetError>>,
    wanted: u32,
) -> NodeOutcome {
    match waited {
        Some(Ok(Value::Int(acked))) if *acked >= i64::from(wanted) => NodeOutcome::Ok,
        Some(Ok(Value::Int(acked))) => NodeOutcome::ReplicasShort {
            acked: (*acked).max(0) as u32,
            wanted,
        },
        Some(Err(e)) => outcome_of(e),
        Some(Ok(other)) => unexpected("WAIT reply", &[other]),
        None => unexpected("WAIT reply", &[]),
    }
}

/// A node's answer that no script returns, reported as such (`what`: which reply; `replies`:
/// the values it had, none when it had no reply). Worded apart from the tallies, which count
/// every answer of every round.
#[cold]
#[inline(never)]
pub(crate) fn unexpected(what: &str, replies: &[&Value]) -> NodeOutcome {
    NodeOutcome::Error(match replies {
        [] => format!("no {what}"),
        [one] => format!("unexpected {what} {}", shown(one)),
        many => {
            let all: Vec<String> = many.iter().map(|v| shown(v)).collect();
            format!("unexpected {what} {}", all.join(", "))
        }
    })
}
