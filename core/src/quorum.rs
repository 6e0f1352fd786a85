//! Scatter/gather: one round of script calls to every node at once.
//!
//! Requests are written to every pooled connection first, then the replies are read, all under
//! one deadline: the round costs the slowest node's round trip, not the sum. Endpoints without
//! an idle connection connect on a scoped thread each, so a node that must connect (or
//! reconnect after its server restarted) does not hold the others up. A node that does not
//! answer by the deadline counts as unreachable for this round.
//!
//! A cluster node's calls are split by the master that serves each call's key slot: one leg
//! per master, sent like any other. Redirections (`MOVED`, `ASK`, `TRYAGAIN`) are followed
//! afterwards, within the same deadline, and the legs' replies are put back in call order.

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use crate::cluster::{Cluster, Redirect};
use crate::error::{NodeOutcome, NodeReport, outcome_of};
use crate::node::{self, Endpoint, Node};
use crate::scripts::Call;

/// What one node answered: one result per call, or the reason it could not be asked.
pub(crate) type NodeAnswer = Result<Vec<RedisResult<Value>>, RedisError>;

/// Some of one node's calls, bound for one endpoint.
struct Leg {
    node: usize,
    endpoint: Result<Arc<Endpoint>, RedisError>,
    /// Indices into the node's calls, in order.
    picks: Vec<usize>,
    /// Each script call is preceded by `ASKING` (a slot being imported).
    asking: bool,
}

/// Sends `calls[i]` to `nodes[i]` (an empty slice skips that node) and gathers the answers
/// before `deadline`.
///
/// `on_timeout` is appended, without waiting for an answer, to the connection of a node that
/// did not answer in time (or whose answer could not be read): a frozen server that wakes
/// later executes it right after our request, in order. The acquire round uses it to undo a
/// grant that arrives too late.
pub(crate) fn exchange(
    nodes: &[Arc<Node>],
    calls: &[&[Call]],
    deadline: Instant,
    on_timeout: Option<&Call>,
) -> Vec<NodeAnswer> {
    debug_assert_eq!(nodes.len(), calls.len());
    let started = Instant::now();
    let asked = |i: usize| calls[i].first().map(|c| c.slot().unwrap_or(0));
    // A first connection's time is not the round's.
    let deadline = match warm_up(nodes, asked) {
        true => deadline + started.elapsed(),
        false => deadline,
    };
    // One server, asked once: no legs to split, no threads to connect on, nothing to gather.
    if let ([node], [calls]) = (nodes, calls)
        && node.as_cluster().is_none()
        && !calls.is_empty()
    {
        let answer = node.endpoint(0, deadline).and_then(|endpoint| {
            let calls: Vec<&Call> = calls.iter().collect();
            connect_and_run(&endpoint, &calls, false, deadline, on_timeout)
        });
        return vec![answer];
    }
    let mut legs = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        if calls[i].is_empty() {
            continue;
        }
        match node.as_cluster() {
            None => legs.push(Leg {
                node: i,
                endpoint: node.endpoint(0, deadline),
                picks: (0..calls[i].len()).collect(),
                asking: false,
            }),
            Some(cluster) => split(cluster, i, calls[i], deadline, &mut legs),
        }
    }
    let mut answers = run(&legs, calls, deadline, on_timeout);
    for (leg, answer) in legs.iter_mut().zip(answers.iter_mut()) {
        if let Some(cluster) = nodes[leg.node].as_cluster() {
            follow(cluster, leg, answer, calls[leg.node], deadline, on_timeout);
        }
    }
    gather(nodes, calls, legs, answers)
}

/// Opens the first connection of each fresh node `i` for which `slot(i)` names the key slot
/// its requests are about, in parallel, within the connect timeout (see [`Node::warm_up`]).
/// Returns once a quorum of the nodes is ready, so that a node that hangs (a host that is
/// gone without a reset, a frozen server) costs only its own connect timeout, finished in the
/// background, not every caller's. Whether there was any to open.
pub(crate) fn warm_up(nodes: &[Arc<Node>], slot: impl Fn(usize) -> Option<u16>) -> bool {
    let fresh = nodes.iter().filter(|n| n.is_fresh()).count();
    if fresh == 0 {
        return false;
    }
    let claimed: Vec<(usize, u16)> = (0..nodes.len())
        .filter_map(|i| slot(i).map(|s| (i, s)))
        .filter(|&(i, _)| nodes[i].claim_warm_up())
        .collect();
    match claimed.as_slice() {
        [] => return false,
        &[(i, slot)] if nodes.len() == 1 => {
            nodes[i].warm_up(slot);
            return true;
        }
        _ => {}
    }
    let (tx, rx) = mpsc::channel();
    for &(i, slot) in &claimed {
        let (node, done) = (Arc::clone(&nodes[i]), tx.clone());
        let opening = move || {
            let _ = done.send(node.warm_up(slot));
        };
        if let Err(e) = std::thread::Builder::new()
            .name("redmutex-connect".into())
            .spawn(opening)
        {
            log::debug!("no thread to connect on ({e}); connecting in turn");
            let _ = tx.send(nodes[i].warm_up(slot));
        }
    }
    drop(tx);
    // Nodes that were connected (or tried) before count as ready; the round asks them anyway.
    let quorum = nodes.len() / 2 + 1;
    let mut ready = nodes.len() - fresh;
    let mut pending = claimed.len();
    while pending > 0 && ready < quorum {
        match rx.recv() {
            Ok(opened) => {
                pending -= 1;
                ready += usize::from(opened);
            }
            Err(_) => break,
        }
    }
    true
}

/// Splits a cluster node's calls by the master that serves each call's slot. A command
/// without keys (a `WAIT`) goes to every master that got a call before it.
fn split(cluster: &Cluster, i: usize, calls: &[Call], deadline: Instant, legs: &mut Vec<Leg>) {
    let first = legs.len();
    for (k, call) in calls.iter().enumerate() {
        match call.slot() {
            Some(slot) => {
                let endpoint = cluster.endpoint(slot, deadline);
                let same = legs[first..]
                    .iter_mut()
                    .find(|l| match (&l.endpoint, &endpoint) {
                        (Ok(a), Ok(b)) => Arc::ptr_eq(a, b),
                        _ => false,
                    });
                match same {
                    Some(leg) => leg.picks.push(k),
                    None => legs.push(Leg {
                        node: i,
                        endpoint,
                        picks: vec![k],
                        asking: false,
                    }),
                }
            }
            None => {
                for leg in &mut legs[first..] {
                    leg.picks.push(k);
                }
            }
        }
    }
}

/// Sends every leg and gathers the replies: one answer per leg.
fn run(
    legs: &[Leg],
    calls: &[&[Call]],
    deadline: Instant,
    on_timeout: Option<&Call>,
) -> Vec<NodeAnswer> {
    let mut answers: Vec<Option<NodeAnswer>> = (0..legs.len()).map(|_| None).collect();
    let mut pooled = Vec::new();
    let mut fresh = Vec::new();
    for (l, leg) in legs.iter().enumerate() {
        match &leg.endpoint {
            Err(e) => answers[l] = Some(Err(e.clone())),
            Ok(endpoint) => match endpoint.take() {
                Some(conn) => pooled.push((l, conn)),
                None => fresh.push(l),
            },
        }
    }
    let leg_calls =
        |leg: &Leg| -> Vec<&Call> { leg.picks.iter().map(|&k| &calls[leg.node][k]).collect() };
    // A leg alone needs no thread to connect on.
    if legs.len() == 1 && fresh.len() == 1 {
        let leg = &legs[0];
        if let Ok(endpoint) = &leg.endpoint {
            let answer =
                connect_and_run(endpoint, &leg_calls(leg), leg.asking, deadline, on_timeout);
            return vec![answer];
        }
    }

    std::thread::scope(|scope| {
        let spawn = |l: usize| {
            let leg = &legs[l];
            let calls = leg_calls(leg);
            scope.spawn(move || match &leg.endpoint {
                Ok(endpoint) => connect_and_run(endpoint, &calls, leg.asking, deadline, on_timeout),
                Err(e) => Err(e.clone()),
            })
        };
        let mut threads: Vec<_> = fresh.iter().map(|&l| (l, spawn(l))).collect();

        // Write every request before reading any reply.
        let mut sent = Vec::with_capacity(pooled.len());
        for (l, mut conn) in pooled {
            match send(&mut conn, &leg_calls(&legs[l]), legs[l].asking, deadline) {
                Ok(()) => sent.push((l, conn)),
                Err(e) if stale(&e) => threads.push((l, spawn(l))),
                Err(e) => answers[l] = Some(Err(e)),
            }
        }
        for (l, mut conn) in sent {
            let leg = &legs[l];
            let answer = receive(&mut conn, &leg_calls(leg), leg.asking, deadline);
            match answer {
                // The server restarted or dropped us while the connection sat in the pool:
                // one retry on a new connection, within the same deadline.
                Err(e) if stale(&e) => threads.push((l, spawn(l))),
                answer => {
                    if let Ok(endpoint) = &leg.endpoint {
                        finish(endpoint, conn, &answer, on_timeout);
                    }
                    answers[l] = Some(answer);
                }
            }
        }
        for (l, t) in threads {
            answers[l] = Some(t.join().unwrap_or_else(|_| Err(node::timed_out())));
        }
    });
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(node::timed_out())))
        .collect()
}

/// One exchange with one endpoint, on a pooled connection or a new one.
fn connect_and_run(
    endpoint: &Arc<Endpoint>,
    calls: &[&Call],
    asking: bool,
    deadline: Instant,
    on_timeout: Option<&Call>,
) -> NodeAnswer {
    if let Some(mut conn) = endpoint.take() {
        let answer = send(&mut conn, calls, asking, deadline)
            .and_then(|()| receive(&mut conn, calls, asking, deadline));
        match answer {
            Err(e) if stale(&e) => {}
            answer => {
                finish(endpoint, conn, &answer, on_timeout);
                return answer;
            }
        }
    }
    let opening = Instant::now();
    let mut conn = endpoint.connect(deadline)?;
    // Opening took at least one round trip (the setup's), which predicts the request's. With
    // less time left than that, the request would most likely time out and take the new
    // connection with it (a connection cut short must be dropped), and so on at every
    // attempt: pool it for the next attempt instead.
    if deadline.saturating_duration_since(Instant::now()) < opening.elapsed() {
        endpoint.put(conn);
        return Err(node::timed_out());
    }
    send(&mut conn, calls, asking, deadline)?;
    let answer = receive(&mut conn, calls, asking, deadline);
    finish(endpoint, conn, &answer, on_timeout);
    answer
}

/// Follows the redirections in a cluster leg's answer until none is left, the deadline
/// passes, or too many were followed. Marks the map stale when the answer suggests a
/// failover.
fn follow(
    cluster: &Cluster,
    leg: &mut Leg,
    answer: &mut NodeAnswer,
    calls: &[Call],
    deadline: Instant,
    on_timeout: Option<&Call>,
) {
    for _ in 0..MAX_FOLLOW {
        let values = match answer {
            Ok(values) => values,
            Err(_) => {
                cluster.mark_stale();
                return;
            }
        };
        if values
            .iter()
            .any(|v| matches!(v, Err(e) if is_readonly(e) || e.code() == Some("CLUSTERDOWN")))
        {
            cluster.mark_stale();
        }
        // The first redirected call; it and every call after it are sent again, so that a
        // `WAIT` still follows the writes it waits for.
        let Some((at, redirect)) = values.iter().enumerate().find_map(|(at, v)| match v {
            Err(e) => cluster.redirect(e).map(|r| (at, r)),
            Ok(_) => None,
        }) else {
            return;
        };
        if node::remaining(deadline).is_err() {
            return;
        }
        let endpoint = match redirect {
            Redirect::To(e) => e,
            Redirect::Ask(e) => {
                leg.asking = true;
                e
            }
            Redirect::Retry => {
                let left = deadline.saturating_duration_since(Instant::now());
                std::thread::sleep(TRY_AGAIN_PAUSE.min(left / 2));
                match &leg.endpoint {
                    Ok(e) => Arc::clone(e),
                    Err(_) => return,
                }
            }
        };
        let again: Vec<&Call> = leg.picks[at..].iter().map(|&k| &calls[k]).collect();
        match connect_and_run(&endpoint, &again, leg.asking, deadline, on_timeout) {
            Ok(redone) => {
                values.truncate(at);
                values.extend(redone);
            }
            Err(e) => {
                for v in &mut values[at..] {
                    *v = Err(e.clone());
                }
                cluster.mark_stale();
                return;
            }
        }
        // A slot that moved for good is asked for without `ASKING` next time.
        leg.endpoint = Ok(endpoint);
        leg.asking = false;
    }
}

/// The most redirections one cluster leg follows in a round.
const MAX_FOLLOW: usize = 5;
/// The pause before a request that got `TRYAGAIN` (a slot in the middle of a migration).
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(5);

/// Puts the legs' answers back together, one answer per node in call order. Where a command
/// without keys went to several masters, the smallest count (the weakest `WAIT`) or an error
/// stands. A cluster node none of whose legs could be asked failed as a whole.
fn gather(
    nodes: &[Arc<Node>],
    calls: &[&[Call]],
    legs: Vec<Leg>,
    answers: Vec<NodeAnswer>,
) -> Vec<NodeAnswer> {
    let mut out: Vec<Option<NodeAnswer>> = (0..nodes.len())
        .map(|i| calls[i].is_empty().then(|| Ok(Vec::new())))
        .collect();
    let mut parts: Vec<Parts> = calls
        .iter()
        .map(|c| Parts {
            values: vec![None; c.len()],
            error: None,
            answered: false,
        })
        .collect();
    // Legs that answered first, so that a failed leg's error does not stand for a command
    // that other legs answered.
    let mut legs: Vec<(Leg, NodeAnswer)> = legs.into_iter().zip(answers).collect();
    legs.sort_by_key(|(_, answer)| answer.is_err());
    for (leg, answer) in legs {
        let i = leg.node;
        if nodes[i].as_cluster().is_none() {
            out[i] = Some(answer);
            continue;
        }
        let p = &mut parts[i];
        match answer {
            Ok(values) => {
                p.answered = true;
                for (&k, v) in leg.picks.iter().zip(values) {
                    p.values[k] = Some(weakest(p.values[k].take(), v, calls[i][k].is_command()));
                }
            }
            Err(e) => {
                let e = match &leg.endpoint {
                    Ok(endpoint) => at_endpoint(e, endpoint.name()),
                    Err(_) => e,
                };
                // The leg's scripts failed; a command after them (a `WAIT`) keeps what the
                // legs that answered said, if any.
                for &k in &leg.picks {
                    if !calls[i][k].is_command() || p.values[k].is_none() {
                        p.values[k] = Some(Err(e.clone()));
                    }
                }
                p.error.get_or_insert(e);
            }
        }
    }
    for (i, p) in parts.into_iter().enumerate() {
        if out[i].is_some() || nodes[i].as_cluster().is_none() {
            continue;
        }
        out[i] = Some(match p.error {
            Some(e) if !p.answered => Err(e),
            _ => Ok(p
                .values
                .into_iter()
                .map(|v| v.unwrap_or_else(|| Err(node::timed_out())))
                .collect()),
        });
    }
    out.into_iter()
        .map(|a| a.unwrap_or_else(|| Err(node::timed_out())))
        .collect()
}

/// An I/O error of one master of a cluster, saying which master: the cluster's report
/// names only the cluster. Refusals and timeouts stay what they were.
fn at_endpoint(e: RedisError, at: &str) -> RedisError {
    if !e.is_io_error() {
        return e;
    }
    let kind = if e.is_connection_refusal() {
        std::io::ErrorKind::ConnectionRefused
    } else if e.is_timeout() {
        std::io::ErrorKind::TimedOut
    } else if e.is_connection_dropped() {
        std::io::ErrorKind::ConnectionReset
    } else {
        std::io::ErrorKind::Other
    };
    let why = if kind == std::io::ErrorKind::TimedOut {
        node::NO_ANSWER.to_owned()
    } else {
        e.to_string()
    };
    RedisError::from(std::io::Error::new(kind, format!("master {at}: {why}")))
}

/// A cluster node's answer while its legs come in.
struct Parts {
    /// Each call's answer so far.
    values: Vec<Option<RedisResult<Value>>>,
    /// The first leg that could not be asked.
    error: Option<RedisError>,
    /// Some leg answered.
    answered: bool,
}

/// The answer that stands for a call after one more leg answered it: for a command sent to
/// several masters, the smaller count or the first error; for a script (sent to one master),
/// its answer.
fn weakest(
    old: Option<RedisResult<Value>>,
    new: RedisResult<Value>,
    command: bool,
) -> RedisResult<Value> {
    match (old, new) {
        (Some(Ok(Value::Int(a))), Ok(Value::Int(b))) if command => Ok(Value::Int(a.min(b))),
        (Some(Err(e)), _) if command => Err(e),
        (_, new) => new,
    }
}

/// Pools a connection that finished cleanly; drops one that did not, so that a late reply is
/// never read as the answer to a later request. A connection that answered `READONLY` is to
/// a master that was demoted to a replica (a failover): it is dropped too, so that the next
/// round connects anew (and, for a Sentinel node, asks the sentinels for the new master).
pub(crate) fn finish(
    endpoint: &Endpoint,
    mut conn: redis::Connection,
    answer: &NodeAnswer,
    on_timeout: Option<&Call>,
) {
    match answer {
        Ok(values) if values.iter().any(|v| matches!(v, Err(e) if is_readonly(e))) => {}
        Ok(_) => endpoint.put(conn),
        // Not only a timeout: a read interrupted by a stop signal (SIGSTOP, then SIGCONT)
        // fails with EINTR although the server ran our request. On a broken connection the
        // write fails, and there is nothing to undo behind.
        Err(_) => {
            if let Some(call) = on_timeout {
                let mut buf = Vec::new();
                call.write_packed(&mut buf);
                let _ = conn.set_write_timeout(Some(std::time::Duration::from_millis(5)));
                let _ = conn.send_packed_command(&buf);
            }
        }
    }
}

/// `ASKING`, sent before each script call of a leg redirected with `ASK`.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

fn send(
    conn: &mut redis::Connection,
    calls: &[&Call],
    asking: bool,
    deadline: Instant,
) -> Result<(), RedisError> {
    // The read timeout is set before each reply is read.
    conn.set_write_timeout(Some(node::remaining(deadline)?))?;
    let mut buf = Vec::with_capacity(256);
    for c in calls {
        if asking && !c.is_command() {
            buf.extend_from_slice(ASKING);
        }
        c.write_packed(&mut buf);
    }
    conn.send_packed_command(&buf)
}

pub(crate) fn receive(
    conn: &mut redis::Connection,
    calls: &[&Call],
    asking: bool,
    deadline: Instant,
) -> NodeAnswer {
    let mut values = Vec::with_capacity(calls.len());
    for c in calls {
        // Replies are read one node after another: when a slow node used up the deadline,
        // the replies that other nodes sent in time are still collected, with a token wait.
        let left = deadline.saturating_duration_since(Instant::now());
        conn.set_read_timeout(Some(left.max(std::time::Duration::from_millis(1))))?;
        if asking && !c.is_command() {
            conn.recv_response()?;
        }
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
            let mut buf = Vec::new();
            if asking && !call.is_command() {
                buf.extend_from_slice(ASKING);
            }
            buf.extend_from_slice(&call.packed_eval());
            conn.send_packed_command(&buf)?;
            if asking && !call.is_command() {
                conn.recv_response()?;
            }
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
        // established (CLIENT KILL, a proxy) may work again on the next try, and a master
        // behind Sentinel or in a cluster may be replaced by a promoted replica.
        if e.is_connection_refusal() && !node.follows_failover() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts;

    fn refused() -> RedisError {
        RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    /// A cluster node's round of two scripts on two masters and one `WAIT` after them.
    fn gathered(a: NodeAnswer, b: NodeAnswer) -> NodeAnswer {
        let node = Node::open(
            "redis+cluster://127.0.0.1:1",
            "t",
            Duration::from_secs(1),
            None,
        )
        .unwrap();
        let script = |key: &str| Call::new(&scripts::STATUS, &[key.as_bytes()], &[]);
        let calls = [
            script("a"),
            script("b"),
            Call::wait(1, Duration::from_millis(10)),
        ];
        let leg = |picks| Leg {
            node: 0,
            endpoint: Err(refused()),
            picks,
            asking: false,
        };
        gather(
            &[Arc::new(node)],
            &[&calls[..]],
            vec![leg(vec![0, 2]), leg(vec![1, 2])],
            vec![a, b],
        )
        .pop()
        .unwrap()
    }

    fn ints(answer: &NodeAnswer) -> Vec<Option<i64>> {
        answer
            .as_ref()
            .unwrap()
            .iter()
            .map(|v| match v {
                Ok(Value::Int(i)) => Some(*i),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_cluster_round_is_put_back_in_call_order_with_the_weakest_wait() {
        let both = gathered(
            Ok(vec![Ok(Value::Int(1)), Ok(Value::Int(2))]),
            Ok(vec![Ok(Value::Int(0)), Ok(Value::Int(1))]),
        );
        assert_eq!(ints(&both), [Some(1), Some(0), Some(1)]);

        // A master that cannot be asked fails its own script, not the other master's WAIT,
        // whichever leg came first.
        for (a, b) in [
            (
                Ok(vec![Ok(Value::Int(1)), Ok(Value::Int(2))]),
                Err(refused()),
            ),
            (
                Err(refused()),
                Ok(vec![Ok(Value::Int(1)), Ok(Value::Int(2))]),
            ),
        ] {
            let first_failed = a.is_err();
            let answer = gathered(a, b);
            let expected = if first_failed {
                [None, Some(1), Some(2)]
            } else {
                [Some(1), None, Some(2)]
            };
            assert_eq!(ints(&answer), expected);
        }

        // No master answered: the node failed as a whole.
        assert!(gathered(Err(refused()), Err(refused())).is_err());
    }
}
