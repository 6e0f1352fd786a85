//! A blocking command (`BLPOP`) on one node, with requests pipelined behind it that the
//! server runs the moment the block ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{Connection, receive, remaining, set_timeouts};
use super::endpoint::Endpoint;
use super::leg::finish;
use super::leg::typed;
use super::node::Node;
use super::poll::{self, Either};
use super::unblock::unblock;
use super::wake;
use crate::wire::Answer;
use crate::wire::{Command, Request};
use crate::wire::{Failure, NetError};

/// How a blocking command ended.
pub(crate) enum Blocked {
    /// It returned (or timed out on the server, or was ended early from another
    /// connection): `woken` when it returned an element (a `BLPOP` that popped one); the
    /// answer to the requests `behind` it, if there were any and they ran (not redirected
    /// to another Cluster master).
    Ended { woken: bool, behind: Option<Answer> },
    /// It did not end by our own deadline: the connection was dropped (the requests behind
    /// it still run when the server ends the block, followed by `on_fail`). Or the deadline
    /// passed before it could be written: then nothing was sent.
    TimedOut,
    /// No connection could be had, or it broke (then `on_fail` could not follow the requests
    /// behind the block: they may have run, and are not undone).
    Failed,
}

/// A blocking command and where it goes.
pub(crate) struct Blocking<'a> {
    pub(crate) node: &'a Node,
    /// The key slot of the command's key.
    pub(crate) slot: u16,
    pub(crate) command: &'a Command,
    /// A connection must be had by then.
    pub(crate) connect_by: Instant,
    /// The command's reply is read until then.
    pub(crate) until: Instant,
}

/// Sends a blocking command with `then` pipelined behind it, and reads its reply until its
/// deadline. The replies to `then` are read within `then_timeout` after it returned.
/// `on_fail` is appended to the connection when the block or the requests' replies did not
/// come in time: it undoes what they did.
pub(crate) fn block_then<R: Request>(
    blocking: Blocking<'_>,
    then: &[&R],
    then_timeout: Duration,
    on_fail: Option<&dyn Request>,
) -> Blocked {
    let Blocking {
        node,
        slot,
        command,
        connect_by,
        until,
    } = blocking;
    let conn = node
        .endpoint(slot, connect_by)
        .and_then(|e| e.take_or_connect(connect_by).map(|c| (e, c)));
    let Ok((endpoint, mut conn)) = conn else {
        return Blocked::Failed;
    };
    // Getting the connection may have taken the wait's time (one opened on a slow network,
    // a client slowed down): then nothing is sent, and the connection goes back as it came.
    // (Taken for a block that timed out, this read replies to requests never sent.)
    let Ok(left) = remaining(until) else {
        endpoint.put(conn);
        return Blocked::TimedOut;
    };
    let mut packed = Vec::new();
    command.write(&mut packed);
    for r in then {
        r.write(&mut packed);
    }
    // The block is read until `until`, but written like any request, within the node
    // timeout (by when a connection was due, while that is still ahead): a request of a few
    // hundred bytes needs no longer, and the next round on this connection (the release
    // after a wait) then finds its write timeout already set.
    let write = remaining(connect_by).map_or(left, |w| w.min(left));
    let waited = conn
        .set_read_timeout(Some(left))
        .and_then(|()| conn.set_write_timeout(Some(write)))
        .and_then(|()| conn.send_packed_command(&packed))
        .and_then(|()| until_woken(&conn, until))
        .and_then(|()| conn.recv_response())
        .map_err(NetError::from);
    // Woken: the block popped an element. One ended early is not known to have taken one
    // (its late reply is skipped).
    let woken = matches!(waited, Ok(redis::Value::Array(_)));
    let read = waited.is_ok();
    // Redis ends a blocking command's timeout on its cron tick (every 100 ms at the default
    // hz 10), so a short block is often still pending at our deadline. Rather than drop the
    // connection (and open a new one for the next call), end the block now from another
    // connection. Its late reply is then sure to come, and redis-rs skips it (the reply to a
    // read that timed out) before the next one.
    if let Err(e) = waited {
        let unblocked = e.failure() == Failure::Timeout
            && conn.id.zip(conn.peer()).is_some_and(|(id, peer)| {
                unblock(&endpoint, id, &peer, Instant::now() + then_timeout).is_some()
            });
        if !unblocked {
            return failed(endpoint, conn, e, then, on_fail);
        }
    }
    if then.is_empty() {
        // A block whose reply was read leaves the connection clean. One ended early has its
        // reply still to come: a reply to read behind it, which the connection skips, makes
        // it clean. (Only then: a `PING` after every wait would cost each waiter one more
        // command and a round trip before its next round.)
        let clean: Result<(), NetError> = match read {
            true => Ok(()),
            false => set_timeouts(&conn, Instant::now() + then_timeout)
                .and_then(|()| Ok(redis::cmd("PING").query::<redis::Value>(&mut conn)?))
                .map(drop),
        };
        if clean.is_ok() {
            endpoint.put(conn);
        }
        return Blocked::Ended {
            woken,
            behind: None,
        };
    }
    let deadline = Instant::now() + then_timeout;
    let mut answer = receive(&mut conn, then, false, deadline).map_err(Into::into);
    // On a Cluster whose slot moved while the block waited, the requests behind it were
    // redirected (`MOVED`, `ASK`: their keys are served elsewhere now) and did not run. That
    // is no answer to the round: the call makes it anew, and its round follows the
    // redirection, as every round does (`redirect.rs`); the map learns of it here.
    let redirected = node.as_cluster().is_some_and(|cluster| {
        matches!(&answer, Ok(replies) if replies
            .iter()
            .any(|r| matches!(r, Err(e) if cluster.redirect(e).is_some())))
    });
    finish(&endpoint, conn, &mut answer, on_fail);
    let behind = (!redirected).then(|| typed(answer));
    Blocked::Ended { woken, behind }
}

/// Waits for the block's reply, or for this thread's wake-up descriptor (see
/// [`crate::wake_on`]): woken first, and told to stop (see `wake.rs`), the read that follows
/// is given no more time, so the block ends as one whose time ran out (ended early from
/// another connection, its late reply skipped), and the call's interrupt check decides what
/// comes next. Told to go on (the descriptor drained), it waits on.
fn until_woken(conn: &Connection, until: Instant) -> redis::RedisResult<()> {
    let (Some(fd), Some(socket)) = (wake::fd(), conn.socket()) else {
        return Ok(());
    };
    if conn.holds(1) {
        return Ok(());
    }
    // Stopped already, before the first poll: by the check that arming the thread's setting
    // ran just now (see `wake.rs`), for a signal that came before the descriptor was set up
    // and so never made it readable.
    while !wake::stopped() {
        match poll::socket_or(socket, &fd, until.saturating_duration_since(Instant::now())) {
            Either::Socket => return Ok(()),
            Either::Woken if !wake::woken_now() => {}
            Either::Woken | Either::TimedOut => break,
        }
    }
    conn.set_read_timeout(Some(Duration::from_micros(100)))
}

/// A block that failed: the requests behind it still run when the server ends it (or have
/// run: a stop signal interrupts the read with EINTR): undo them behind.
fn failed<R: Request>(
    endpoint: Arc<Endpoint>,
    conn: Connection,
    e: NetError,
    then: &[&R],
    on_fail: Option<&dyn Request>,
) -> Blocked {
    let timed_out = e.failure() == Failure::Timeout;
    let mut failed = Err(e);
    if !then.is_empty() {
        finish(&endpoint, conn, &mut failed, on_fail);
    }
    match failed {
        Err(e) if e.followup_lost() => Blocked::Failed,
        _ if timed_out => Blocked::TimedOut,
        _ => Blocked::Failed,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::net::endpoint::Setup;
    use crate::net::testing::Server;

    /// A wait whose time ran out before its block could be written (getting a connection
    /// took it: a connection opened on a slow network, a client slowed down): nothing is
    /// sent, so there is no block to end early and no reply to read behind it. It ends at
    /// once as timed out, and its connection goes back in step.
    #[test]
    fn a_wait_whose_time_ran_out_before_the_block_was_written_sends_nothing() {
        let server = Server::start();
        let setup = Setup {
            client_name: "block-test".into(),
            connect_timeout: Duration::from_secs(2),
            preload: Arc::new([]),
            probe: None,
        };
        let node = Node::open(&server.url, setup, None).unwrap();
        let slot = crate::net::key_slot(b"{w}:wake");
        let mut blpop = redis::cmd("BLPOP");
        blpop.arg("{w}:wake").arg("0.001");
        let mut incr = redis::cmd("INCR");
        incr.arg("{w}:ran");
        let behind = Command::keyed(incr, slot);
        let begun = Instant::now();
        let blocked = block_then(
            Blocking {
                node: &node,
                slot,
                command: &Command::keyed(blpop, slot),
                connect_by: begun + Duration::from_secs(2),
                // The wait's time is already up.
                until: begun,
            },
            &[&behind],
            Duration::from_secs(1),
            None,
        );
        let took = begun.elapsed();
        assert!(
            matches!(blocked, Blocked::TimedOut),
            "a wait with no time left times out, without an answer to read"
        );
        assert!(
            took < Duration::from_millis(500),
            "it ended at once, took {took:?}"
        );
        let mut check = redis::Client::open(server.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let ran: Option<i64> = redis::cmd("GET").arg("{w}:ran").query(&mut check).unwrap();
        assert_eq!(ran, None, "the request behind the block was never sent");
        // The connection went back in step: the next request on it gets its own reply.
        let endpoint = node.endpoint(slot, begun + Duration::from_secs(2)).unwrap();
        let mut conn = endpoint.take().expect("the connection is back in the pool");
        let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
        assert_eq!(pong, "PONG");
    }
}
