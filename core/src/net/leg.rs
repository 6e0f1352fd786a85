//! A leg of a round: some of one node's requests, bound for one endpoint, what it answers,
//! and one exchange with that endpoint on a connection of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use super::classify::is_read_only;
use super::conn::{Connection, receive, send};
use super::endpoint::Endpoint;
use crate::wire::{Answer, NetError, Request};

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
    if let Some(mut conn) = endpoint.take() {
        match send(&mut conn, requests, asking, deadline) {
            // The server closed it before the requests could be written: nothing ran.
            Err(e) if stale(&e) => {}
            sent => {
                let mut answer = sent
                    .and_then(|()| receive(&mut conn, requests, asking, deadline))
                    .map_err(NetError::from);
                broke_after_write(&mut answer);
                finish(endpoint, conn, &mut answer, on_timeout);
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
                .any(|v| matches!(v, Err(e) if is_read_only(e))) => {}
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
/// idle timeout), found so when a request could not be written on it: worth one retry on a
/// new connection. A timeout is not: the node is slow.
pub(super) fn stale(e: &redis::RedisError) -> bool {
    !e.is_timeout() && e.is_connection_dropped()
}

/// A connection that broke after its requests were written (their replies never came): they
/// may have run, for all the client can tell, and nothing can follow them on it. Not sent
/// again here: a request sent twice hides from its caller that the first one may have run
/// (a release that finds its key gone could not tell its own earlier run from a loss). The
/// failure says that a follow-up (an undo) could not be written, so that the caller reaches
/// the server another way. (A pooled connection the server closed while it sat idle is left
/// before anything is written on it: see `Connection::closed_by_server`.)
pub(super) fn broke_after_write(answer: &mut Raw) {
    if let Err(e) = answer
        && e.failure() == crate::wire::Failure::Dropped
    {
        e.lose_followup();
    }
}
