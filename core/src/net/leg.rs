//! A leg of a round: some of one node's requests, bound for one endpoint, what it answers,
//! and one exchange with that endpoint on a connection of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use super::conn::{Connection, receive, send};
use super::endpoint::Endpoint;
use super::error::NetError;
use super::request::Request;

/// What one node answered: one reply per request, or why it could not be asked.
pub(crate) type Answer = Result<Vec<Result<Value, NetError>>, NetError>;

/// A leg's answer as read, before the replies are typed: a cluster's redirections are
/// followed on these.
pub(crate) type Raw = Result<Vec<RedisResult<Value>>, NetError>;

/// Some of one node's requests, bound for one endpoint.
pub(crate) struct Leg {
    pub(crate) node: usize,
    pub(crate) endpoint: Result<Arc<Endpoint>, NetError>,
    /// Indices into the node's requests, in order.
    pub(crate) picks: Vec<usize>,
    /// Each keyed request is preceded by `ASKING` (a slot being imported).
    pub(crate) asking: bool,
}

/// A raw answer with each reply typed.
pub(crate) fn typed(raw: Raw) -> Answer {
    raw.map(|values| {
        values
            .into_iter()
            .map(|v| v.map_err(NetError::from))
            .collect()
    })
}

/// The answers of a round that ended at its quorum, with each answer left to come counted
/// as a node that did not answer in time.
pub(crate) fn unread_as_timeouts(answers: Vec<Option<Answer>>) -> Vec<Answer> {
    answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(NetError::timeout())))
        .collect()
}

/// One exchange with one endpoint, on a pooled connection or a new one.
pub(super) fn connect_and_run<R: Request>(
    endpoint: &Arc<Endpoint>,
    requests: &[R],
    asking: bool,
    deadline: Instant,
    on_timeout: Option<&dyn Request>,
) -> Raw {
    // Whether the requests were written on a pooled connection that broke before their
    // replies came: they may have run there.
    let mut written = false;
    if let Some(mut conn) = endpoint.take() {
        let answer = send(&mut conn, requests, asking, deadline).and_then(|()| {
            written = true;
            receive(&mut conn, requests, asking, deadline)
        });
        match answer {
            Err(e) if stale(&e) => {}
            answer => {
                let mut answer = answer.map_err(NetError::from);
                finish(endpoint, conn, &mut answer, on_timeout);
                return answer;
            }
        }
    }
    let mut answer = connect_and_run_fresh(endpoint, requests, asking, deadline, on_timeout);
    // The retry failed too: what it queued behind its own requests is no undo for the ones
    // that may have run on the broken connection.
    if written && let Err(e) = &mut answer {
        e.lose_followup();
    }
    answer
}

/// [`connect_and_run`] on a new connection.
fn connect_and_run_fresh<R: Request>(
    endpoint: &Arc<Endpoint>,
    requests: &[R],
    asking: bool,
    deadline: Instant,
    on_timeout: Option<&dyn Request>,
) -> Raw {
    let opening = Instant::now();
    let mut conn = endpoint.connect(deadline)?;
    // Opening took at least one round trip (the setup's), which predicts the request's. With
    // less time left than that, the request would most likely time out and take the new
    // connection with it (a connection cut short must be dropped), and so on at every
    // attempt: pool it for the next attempt instead.
    if deadline.saturating_duration_since(Instant::now()) < opening.elapsed() {
        endpoint.put(conn);
        return Err(NetError::timeout());
    }
    send(&mut conn, requests, asking, deadline)?;
    let mut answer = receive(&mut conn, requests, asking, deadline).map_err(NetError::from);
    finish(endpoint, conn, &mut answer, on_timeout);
    answer
}

/// Pools a connection that finished cleanly; drops one that did not, so that a late reply is
/// never read as the answer to a later request. A connection that answered `READONLY` is to
/// a master that was demoted to a replica (a failover): it is dropped too, so that the next
/// round connects anew (and, for a Sentinel node, asks the sentinels for the new master).
///
/// A failed answer gets `on_timeout` written behind its request; when even that write fails
/// (the connection broke), the answer's failure says so ([`NetError::followup_lost`]).
pub(super) fn finish(
    endpoint: &Endpoint,
    mut conn: Connection,
    answer: &mut Raw,
    on_timeout: Option<&dyn Request>,
) {
    match answer {
        Ok(values)
            if values
                .iter()
                .any(|v| matches!(v, Err(e) if e.code() == Some("READONLY"))) => {}
        Ok(_) => endpoint.put(conn),
        // Not only a timeout: a read interrupted by a stop signal (SIGSTOP, then SIGCONT)
        // fails with EINTR although the server ran the request. On a broken connection the
        // write fails: the caller must reach the server another way.
        Err(e) => {
            if let Some(request) = on_timeout {
                let mut buf = Vec::new();
                request.write(&mut buf);
                let _ = conn.set_write_timeout(Some(Duration::from_millis(5)));
                if conn.send_packed_command(&buf).is_err() {
                    e.lose_followup();
                }
            }
        }
    }
}

/// A pooled connection that the server closed while it sat idle (restart, `CLIENT KILL`,
/// idle timeout): worth one retry on a new connection. A timeout is not: the node is slow.
pub(super) fn stale(e: &redis::RedisError) -> bool {
    !e.is_timeout() && e.is_connection_dropped()
}
