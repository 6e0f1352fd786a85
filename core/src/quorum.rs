//! Scatter/gather: one round of script calls to every node at once.
//!
//! Requests are written to every pooled connection first, then the replies are read, all under
//! one deadline: the round costs the slowest node's round trip, not the sum. Nodes without an
//! idle connection connect on a scoped thread each, so a node that must connect (or reconnect
//! after its server restarted) does not hold the others up. A node that does not answer by
//! the deadline counts as unreachable for this round.

use std::sync::Arc;
use std::time::Instant;

use redis::{RedisError, RedisResult, Value};

use crate::error::{NodeOutcome, NodeReport, outcome_of};
use crate::node::{self, Node};
use crate::scripts::Call;

/// What one node answered: one result per call, or the reason it could not be asked.
pub(crate) type NodeAnswer = Result<Vec<RedisResult<Value>>, RedisError>;

/// Sends `calls[i]` to `nodes[i]` (an empty list skips that node) and gathers the answers
/// before `deadline`.
///
/// `on_timeout` is appended, without waiting for an answer, to the connection of a node that
/// did not answer in time: a frozen server that wakes later executes it right after our
/// request, in order. The acquire round uses it to undo a grant that arrives too late.
pub(crate) fn exchange(
    nodes: &[Arc<Node>],
    calls: &[Vec<Call>],
    deadline: Instant,
    on_timeout: Option<&Call>,
) -> Vec<NodeAnswer> {
    debug_assert_eq!(nodes.len(), calls.len());
    let mut answers: Vec<Option<NodeAnswer>> = (0..nodes.len()).map(|_| None).collect();
    let mut pooled = Vec::new();
    let mut fresh = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        if calls[i].is_empty() {
            answers[i] = Some(Ok(Vec::new()));
        } else if let Some(conn) = node.take() {
            pooled.push((i, conn));
        } else {
            fresh.push(i);
        }
    }

    std::thread::scope(|scope| {
        let connect_and_run = |i: usize| {
            let node = &nodes[i];
            let calls = &calls[i];
            scope.spawn(move || {
                let mut conn = node.connect(deadline)?;
                send(&mut conn, calls, deadline)?;
                let answer = receive(&mut conn, calls, deadline);
                finish(node, conn, &answer, on_timeout);
                answer
            })
        };
        let mut threads: Vec<_> = fresh.iter().map(|&i| (i, connect_and_run(i))).collect();

        // Write every request before reading any reply.
        let mut sent = Vec::with_capacity(pooled.len());
        for (i, mut conn) in pooled {
            match send(&mut conn, &calls[i], deadline) {
                Ok(()) => sent.push((i, conn)),
                Err(e) if stale(&e) => threads.push((i, connect_and_run(i))),
                Err(e) => answers[i] = Some(Err(e)),
            }
        }
        for (i, mut conn) in sent {
            let answer = receive(&mut conn, &calls[i], deadline);
            match answer {
                // The server restarted or dropped us while the connection sat in the pool:
                // one retry on a new connection, within the same deadline.
                Err(e) if stale(&e) => threads.push((i, connect_and_run(i))),
                answer => {
                    finish(&nodes[i], conn, &answer, on_timeout);
                    answers[i] = Some(answer);
                }
            }
        }
        for (i, t) in threads {
            answers[i] = Some(t.join().unwrap_or_else(|_| Err(node::timed_out())));
        }
    });
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(node::timed_out())))
        .collect()
}

/// Pools a connection that finished cleanly; drops one that did not, so that a late reply is
/// never read as the answer to a later request. A connection that answered `READONLY` is to
/// a master that was demoted to a replica (a failover): it is dropped too, so that the next
/// round connects anew (and, for a Sentinel node, asks the sentinels for the new master).
fn finish(
    node: &Node,
    mut conn: redis::Connection,
    answer: &NodeAnswer,
    on_timeout: Option<&Call>,
) {
    match answer {
        Ok(values) if values.iter().any(|v| matches!(v, Err(e) if is_readonly(e))) => {}
        Ok(_) => node.put(conn),
        Err(e) if e.is_timeout() => {
            if let Some(call) = on_timeout {
                let mut buf = Vec::new();
                call.write_packed(&mut buf);
                let _ = conn.set_write_timeout(Some(std::time::Duration::from_millis(5)));
                let _ = conn.send_packed_command(&buf);
            }
        }
        Err(_) => {}
    }
}

fn send(conn: &mut redis::Connection, calls: &[Call], deadline: Instant) -> Result<(), RedisError> {
    // The read timeout is set before each reply is read.
    conn.set_write_timeout(Some(node::remaining(deadline)?))?;
    let mut buf = Vec::new();
    for c in calls {
        c.write_packed(&mut buf);
    }
    conn.send_packed_command(&buf)
}

fn receive(conn: &mut redis::Connection, calls: &[Call], deadline: Instant) -> NodeAnswer {
    let mut values = Vec::with_capacity(calls.len());
    for _ in calls {
        // Replies are read one node after another: when a slow node used up the deadline,
        // the replies that other nodes sent in time are still collected, with a token wait.
        let left = deadline.saturating_duration_since(Instant::now());
        conn.set_read_timeout(Some(left.max(std::time::Duration::from_millis(1))))?;
        values.push(conn.recv_response()?);
    }
    // A server that lost its scripts (SCRIPT FLUSH) gets the script text once more. A command
    // after a re-sent script (a `WAIT`) is re-sent too, so that it still follows the write.
    let mut results = Vec::with_capacity(values.len());
    let mut resent = false;
    for (call, value) in calls.iter().zip(values) {
        let value = if is_noscript(&value) || (resent && call.is_command()) {
            resent = true;
            node::set_timeouts(conn, deadline)?;
            conn.send_packed_command(&call.packed_eval())?;
            conn.recv_response()?
        } else {
            value
        };
        results.push(value.extract_error());
    }
    Ok(results)
}

fn is_readonly(e: &RedisError) -> bool {
    e.code() == Some("READONLY")
}

fn is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// A pooled connection that the server closed while it sat idle (restart, `CLIENT KILL`,
/// idle timeout): worth one retry on a new connection. A timeout is not: the node is slow.
fn stale(e: &RedisError) -> bool {
    !e.is_timeout() && e.is_connection_dropped()
}

/// How the nodes voted on one call of a round.
#[derive(Default)]
pub(crate) struct Tally {
    /// Nodes that granted or confirmed.
    pub(crate) yes: usize,
    /// Nodes that definitely said no: the lock is missing there or another owner has it.
    pub(crate) refused: usize,
    /// Of `refused`: nodes where the lock was missing.
    pub(crate) missing: usize,
    /// Nodes that could not be asked or answered with an error.
    pub(crate) failed: usize,
    /// Of `failed`: nodes that refused the connection (down), not merely slow or flaky.
    pub(crate) down: usize,
    /// Each node's answer, for error reports.
    pub(crate) reports: Vec<NodeReport>,
    /// One underlying redis error, for `Error::source`.
    pub(crate) source: Option<RedisError>,
}

impl Tally {
    /// Records a node that could not be asked or answered with an error.
    pub(crate) fn fail(&mut self, node: &Node, e: RedisError) {
        self.failed += 1;
        // Only a refused connection says the node is down: a connection dropped after it was
        // established (CLIENT KILL, a proxy) may work again on the next try.
        if e.is_connection_refusal() {
            self.down += 1;
        }
        self.reports.push(NodeReport {
            node: node.name().to_owned(),
            outcome: outcome_of(&e),
        });
        self.source.get_or_insert(e);
    }

    pub(crate) fn push(&mut self, node: &Node, outcome: NodeOutcome) {
        match outcome {
            NodeOutcome::Ok => self.yes += 1,
            NodeOutcome::Missing => {
                self.refused += 1;
                self.missing += 1
            }
            NodeOutcome::Taken { .. } => self.refused += 1,
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
    pub(crate) fn of_ints(
        nodes: &[Arc<Node>],
        answers: &[NodeAnswer],
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
                Ok(Some(Ok(other))) => t.push(
                    node,
                    NodeOutcome::Error(format!("unexpected reply {other:?}")),
                ),
                Ok(Some(Err(e))) | Err(e) => t.fail(node, e.clone()),
                Ok(None) => t.fail(node, node::timed_out()),
            }
        }
        t
    }
}

/// What a node's `WAIT` reply means for a write that the node accepted: [`NodeOutcome::Ok`]
/// when at least `wanted` replicas acknowledged it, else why not.
pub(crate) fn replicas_outcome(waited: Option<&RedisResult<Value>>, wanted: u32) -> NodeOutcome {
    match waited {
        Some(Ok(Value::Int(acked))) if *acked >= i64::from(wanted) => NodeOutcome::Ok,
        Some(Ok(Value::Int(acked))) => NodeOutcome::ReplicasShort {
            acked: (*acked).max(0) as u32,
            wanted,
        },
        Some(Err(e)) => outcome_of(e),
        other => NodeOutcome::Error(format!("unexpected WAIT reply {other:?}")),
    }
}
