//! The fan-out: one round of requests to every node at once, under one deadline.
//!
//! Requests are written to every pooled connection first, then the replies are read: the
//! round costs the slowest node's round trip, not the sum, and a round decided by a quorum
//! ends with the quorum's first replies, read as they come where the connections' sockets
//! can be waited on together (`wait.rs`), one after another otherwise. Endpoints without an
//! idle connection connect on a scoped thread each, so a node that must connect (or
//! reconnect after its server restarted) does not hold the others up. A node that does not
//! answer by the deadline counts as unreachable for this round.
//!
//! A cluster node's requests are split by the master that serves each request's key slot:
//! one leg per master, sent like any other (`redirect.rs`). Redirections (`MOVED`, `ASK`,
//! `TRYAGAIN`) are followed afterwards, within the same deadline, and the legs' replies are
//! put back in request order (see `gather.rs`).

use std::sync::Arc;
use std::time::Instant;

use super::conn::{Connection, receive, send};
use super::gather::gather;
use super::leg::{
    Leg, Raw, broke_after_write, connect_and_run, finish, stale, typed, unread_as_timeouts,
};
use super::node::Node;
use super::redirect::{follow, split};
use super::wait::as_they_come;
use super::wake;
use super::warm::warm_up;
use crate::wire::Answer;
use crate::wire::NetError;
use crate::wire::Request;

/// Sends `requests[i]` to `nodes[i]` (an empty slice skips that node) and gathers the answers
/// before `deadline`.
///
/// `on_timeout` is appended, without waiting for an answer, to the connection of a node that
/// did not answer in time (or whose answer could not be read): a frozen server that wakes
/// later executes it right after the request, in order. A caller uses it to undo what a
/// request that arrives too late would do.
pub(crate) fn exchange<R: Request>(
    nodes: &[Arc<Node>],
    requests: &[&[R]],
    deadline: Instant,
    on_timeout: Option<&dyn Request>,
) -> Vec<Answer> {
    unread_as_timeouts(exchange_until(
        nodes,
        requests,
        deadline,
        on_timeout,
        &mut |_, _| Enough::No,
    ))
}

/// Whether the answers read so far decide a round (see [`exchange_until`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Enough {
    /// Keep reading.
    No,
    /// Stop reading: the round is decided. With `undo`, `on_timeout` is written behind the
    /// requests of every node whose answer was not read (the round failed, and what those
    /// requests do must be undone as they run).
    Yes { undo: bool },
}

impl Enough {
    /// Stop reading once `decided`, with nothing to undo.
    pub(crate) fn when(decided: bool) -> Enough {
        match decided {
            true => Enough::Yes { undo: false },
            false => Enough::No,
        }
    }
}

/// Like [`exchange`], handing each node's answer to `enough` as it is read: once that says
/// the round is decided, the answers not read yet are left to come (`None`) and the round
/// returns at once — it ends at its quorum rather than with its slowest node. Their
/// connections go back to the pool owing those replies, which are read before the
/// connection's next use (a connection whose replies have not come by then is dropped), so
/// that a late reply is never taken for another request's.
///
/// Only answers read from pooled connections of plain nodes end a round early: answers on
/// connections being opened and cluster legs are all waited for, as in [`exchange`].
pub(crate) fn exchange_until<R: Request>(
    nodes: &[Arc<Node>],
    requests: &[&[R]],
    deadline: Instant,
    on_timeout: Option<&dyn Request>,
    enough: &mut dyn FnMut(usize, &Answer) -> Enough,
) -> Vec<Option<Answer>> {
    debug_assert_eq!(nodes.len(), requests.len());
    let asked = |i: usize| requests[i].first().map(|r| r.slot().unwrap_or(0));
    // A first connection's time is not the round's.
    let deadline = deadline + warm_up(nodes, asked);
    // One server, asked once: no legs to split, no threads to connect on, nothing to gather.
    if let ([node], [requests]) = (nodes, requests)
        && node.as_cluster().is_none()
        && !requests.is_empty()
    {
        let answer = node
            .endpoint(0, deadline)
            .and_then(|endpoint| connect_and_run(&endpoint, requests, false, deadline, on_timeout));
        let answer = typed(answer);
        enough(0, &answer);
        return vec![Some(answer)];
    }
    fan_out(nodes, requests, deadline, on_timeout, enough)
}

/// [`exchange_until`] with several nodes, or a cluster: legs, threads to connect on, and the
/// answers gathered. Kept apart from the one-node path, which stays small: a round's code
/// competes for the instruction cache with redis-rs's and the kernel's.
#[inline(never)]
fn fan_out<R: Request>(
    nodes: &[Arc<Node>],
    requests: &[&[R]],
    deadline: Instant,
    on_timeout: Option<&dyn Request>,
    enough: &mut dyn FnMut(usize, &Answer) -> Enough,
) -> Vec<Option<Answer>> {
    let mut legs = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        if requests[i].is_empty() {
            continue;
        }
        match node.as_cluster() {
            None => legs.push(Leg {
                node: i,
                endpoint: node.endpoint(0, deadline),
                picks: (0..requests[i].len()).collect(),
                asking: false,
            }),
            Some(cluster) => split(cluster, i, requests[i], deadline, &mut legs),
        }
    }
    let single = |i: usize| nodes[i].as_cluster().is_none();
    let mut told = vec![false; nodes.len()];
    let mut tell = |i: usize, raw: &Raw| {
        told[i] = true;
        enough(i, &typed(raw.clone()))
    };
    let (mut answers, unread) = run(&legs, requests, deadline, on_timeout, &single, &mut tell);
    for (leg, answer) in legs.iter_mut().zip(answers.iter_mut()) {
        if let Some(cluster) = nodes[leg.node].as_cluster() {
            follow(
                cluster,
                leg,
                answer,
                requests[leg.node],
                deadline,
                on_timeout,
            );
        }
    }
    let unread: Vec<usize> = unread.iter().map(|&l| legs[l].node).collect();
    let mut answers: Vec<Option<Answer>> = gather(nodes, requests, legs, answers)
        .into_iter()
        .map(Some)
        .collect();
    for i in unread {
        answers[i] = None;
    }
    for (i, answer) in answers.iter().enumerate() {
        if let Some(answer) = answer
            && !told[i]
            && !requests[i].is_empty()
        {
            enough(i, answer);
        }
    }
    answers
}

/// Sends every leg and gathers the replies: one answer per leg, and the legs left unread
/// because `tell` (asked about each answer of a leg to a `single` node as it is read) said
/// the round was decided.
fn run<R: Request>(
    legs: &[Leg],
    requests: &[&[R]],
    deadline: Instant,
    on_timeout: Option<&dyn Request>,
    single: &dyn Fn(usize) -> bool,
    tell: &mut dyn FnMut(usize, &Raw) -> Enough,
) -> (Vec<Raw>, Vec<usize>) {
    let mut answers: Vec<Option<Raw>> = (0..legs.len()).map(|_| None).collect();
    let mut pooled = Vec::with_capacity(legs.len());
    let mut fresh = Vec::new();
    for (l, leg) in legs.iter().enumerate() {
        match &leg.endpoint {
            Err(e) => answers[l] = Some(Err(e.clone())),
            // Replies still owed by an earlier round's slower node come first on the
            // connection: they are read ahead of this round's, within its deadline. One the
            // server closed while it sat idle is left: nothing was written on it.
            Ok(endpoint) => match endpoint.take_owing() {
                Some(conn) if !conn.closed_by_server() => pooled.push((l, conn)),
                _ => fresh.push(l),
            },
        }
    }
    // Each leg's requests, in the order its connection answers them.
    let by_leg: Vec<Vec<&R>> = legs
        .iter()
        .map(|leg| leg.picks.iter().map(|&k| &requests[leg.node][k]).collect())
        .collect();
    let leg_requests = |l: usize| by_leg[l].as_slice();
    // A leg alone needs no thread to connect on.
    if legs.len() == 1 && fresh.len() == 1 {
        let leg = &legs[0];
        if let Ok(endpoint) = &leg.endpoint {
            let answer =
                connect_and_run(endpoint, leg_requests(0), leg.asking, deadline, on_timeout);
            return (vec![answer], Vec::new());
        }
    }

    let mut unread = Vec::new();
    // Threads that connect for a call whose waits may stop stop with it.
    let stop = wake::for_helper();
    std::thread::scope(|scope| {
        let spawn = |l: usize| {
            let leg = &legs[l];
            let requests = leg_requests(l);
            let stop = stop.clone();
            scope.spawn(move || {
                wake::helping(stop, || match &leg.endpoint {
                    Ok(endpoint) => {
                        connect_and_run(endpoint, requests, leg.asking, deadline, on_timeout)
                    }
                    Err(e) => Err(e.clone()),
                })
            })
        };
        let mut threads: Vec<_> = fresh.iter().map(|&l| (l, spawn(l))).collect();

        // Write every request before reading any reply.
        let mut sent = Vec::with_capacity(pooled.len());
        for (l, mut conn) in pooled {
            match send(&mut conn, leg_requests(l), legs[l].asking, deadline) {
                Ok(()) => sent.push((l, conn)),
                Err(e) if stale(&e) => threads.push((l, spawn(l))),
                Err(e) => answers[l] = Some(Err(e.into())),
            }
        }
        let mut decided = None;
        // One leg's answer, read now: its outcome, and whether it decided the round (with
        // or without an undo behind the requests left unread).
        let mut read = |l: usize, mut conn: Connection, began: Instant| -> Option<bool> {
            let leg = &legs[l];
            let answer = conn
                .settle_owed(deadline)
                .and_then(|()| receive(&mut conn, leg_requests(l), leg.asking, deadline));
            if let Ok(endpoint) = &leg.endpoint {
                endpoint.note_read_wait(began.elapsed());
            }
            let mut answer = answer.map_err(NetError::from);
            broke_after_write(&mut answer);
            if let Ok(endpoint) = &leg.endpoint {
                finish(endpoint, conn, &mut answer, on_timeout);
            }
            let verdict = match single(leg.node) {
                true => tell(leg.node, &answer),
                false => Enough::No,
            };
            answers[l] = Some(answer);
            match verdict {
                Enough::Yes { undo } => Some(undo),
                Enough::No => None,
            }
        };
        // Replies are read as they come where the sockets can be waited on together, so
        // that a round ends with its quorum's first replies, not with the first nodes in a
        // list; then the others', one after another.
        let (waiting, mut rest): (Vec<_>, Vec<_>) = sent
            .into_iter()
            .partition(|(l, conn)| single(legs[*l].node) && !legs[*l].asking && conn.can_wait());
        let expected = |l: usize| legs[l].picks.len();
        let not_read = as_they_come(waiting, expected, deadline, &mut |l, conn, began| {
            decided = read(l, conn, began);
            decided.is_some()
        });
        rest.extend(not_read);
        // Read first what most likely came first (see `Endpoint::read_rank`).
        rest.sort_by_key(|(l, conn)| legs[*l].endpoint.as_ref().map(|e| e.read_rank(conn)).ok());
        let mut sent = rest.into_iter();
        if decided.is_none() {
            for (l, conn) in sent.by_ref() {
                decided = read(l, conn, Instant::now());
                if decided.is_some() {
                    break;
                }
            }
        }
        // Decided: the rest are not waited for; their connections owe the replies.
        if let Some(undo) = decided {
            for (l, mut conn) in sent {
                let leg = &legs[l];
                let mut owed = leg_requests(l).len() as u32;
                if undo && let Some(request) = on_timeout {
                    match queue_behind(&mut conn, request) {
                        Ok(()) => owed += 1,
                        // The connection is dropped; the node must be reached another way.
                        Err(e) => {
                            answers[l] = Some(Err(e));
                            continue;
                        }
                    }
                }
                unread.push(l);
                answers[l] = Some(Err(NetError::timeout()));
                // The replies owed by earlier rounds that this round's wait took in, or that
                // must have come by now, are read here, at no wait; a connection whose replies
                // did not come is dropped.
                if let Ok(endpoint) = &leg.endpoint
                    && conn.settle_taken_in().is_ok()
                    && endpoint.drain(&mut conn, deadline).is_ok()
                {
                    conn.owe(owed);
                    endpoint.put(conn);
                }
            }
        }
        // Joined once done, or once this thread's waits stopped (they then stop too).
        wake::until_done(|| threads.iter().all(|(_, t)| t.is_finished()));
        for (l, t) in threads {
            answers[l] = Some(t.join().unwrap_or_else(|_| Err(NetError::timeout())));
        }
    });
    let answers = answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(NetError::timeout())))
        .collect();
    (answers, unread)
}

/// Writes `undo` behind the requests whose replies a decided round leaves unread on `conn`,
/// so that the server runs it right after them. When it cannot be written (a full send buffer
/// on a frozen node, a reset between the poll and the write), the requests may have run while
/// their undo cannot follow: the answer is a failure that says so
/// ([`NetError::followup_lost`]), as [`finish`] reports it for a failed request, so that the
/// round hands the node to the background clean-up rather than forgetting it.
fn queue_behind(conn: &mut Connection, undo: &dyn Request) -> Result<(), NetError> {
    let mut buf = Vec::new();
    undo.write(&mut buf);
    conn.send_packed_command(&buf).map_err(|_| {
        let mut e = NetError::timeout();
        e.lose_followup();
        e
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use redis::RedisConnectionInfo;

    use super::*;
    use crate::net::conn::Io;
    use crate::net::plain::Plain;
    use crate::net::socket::Socket;
    use crate::wire::Command;

    /// An undo that cannot be written behind an unread request (the server's end is gone)
    /// is reported as a lost follow-up, which the round hands to the background clean-up.
    #[test]
    fn an_undo_that_cannot_be_written_is_a_lost_follow_up() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let by = Instant::now() + Duration::from_secs(2);
        let plain = Plain::over(
            Socket::unix(ours),
            None,
            &RedisConnectionInfo::default(),
            by,
        )
        .unwrap();
        let mut conn = Connection::new(Io::Plain(plain), None);
        drop(theirs);
        let mut del = redis::cmd("DEL");
        del.arg("k");
        let undo = Command::new(del);
        let e = queue_behind(&mut conn, &undo).unwrap_err();
        assert!(e.followup_lost());
    }
}
