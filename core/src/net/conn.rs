//! One blocking connection: opening it within a budget, its deadlines, and pipelined
//! requests written at once and read back reply by reply.

use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use super::error::NetError;
use super::request::Request;

/// A set-up connection, with the server's id for it (`CLIENT ID`): another connection ends a
/// blocking command on this one early by that id (`CLIENT UNBLOCK`), without dropping it.
pub(crate) struct Connection {
    io: redis::Connection,
    /// `None` when the server would not say (an ACL user without `client|id`).
    pub(crate) id: Option<i64>,
    /// Replies still to come for requests whose round ended without them (at its quorum):
    /// read before the connection is used again.
    owed: u32,
}

impl Connection {
    pub(crate) fn new(io: redis::Connection, id: Option<i64>) -> Connection {
        Connection { io, id, owed: 0 }
    }

    /// Notes `n` more replies to come.
    pub(crate) fn owe(&mut self, n: u32) {
        self.owed += n;
    }

    /// Reads (and drops) the replies still to come, waiting for them until `deadline`. An
    /// error when they did not all come: the connection is then out of step and must be
    /// dropped.
    pub(crate) fn settle_owed(&mut self, deadline: Instant) -> RedisResult<()> {
        while self.owed > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            self.io
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            self.io.recv_response()?;
            self.owed -= 1;
        }
        Ok(())
    }
}

impl std::ops::Deref for Connection {
    type Target = redis::Connection;
    fn deref(&self) -> &redis::Connection {
        &self.io
    }
}

impl std::ops::DerefMut for Connection {
    fn deref_mut(&mut self) -> &mut redis::Connection {
        &mut self.io
    }
}

/// The time left until `deadline`, or a timeout when there is none.
pub(crate) fn remaining(deadline: Instant) -> Result<Duration, NetError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_micros(100) {
        Err(NetError::timeout())
    } else {
        Ok(left)
    }
}

/// Bounds both directions of `conn` by `deadline`.
pub(crate) fn set_timeouts(conn: &redis::Connection, deadline: Instant) -> Result<(), NetError> {
    let left = remaining(deadline)?;
    conn.set_read_timeout(Some(left))?;
    conn.set_write_timeout(Some(left))?;
    Ok(())
}

/// Opens a connection of `client` within `budget`. redis-rs bounds the TCP connect and then
/// each handshake reply (`AUTH`, `SELECT`) by the timeout it is given, one after another, so
/// the budget is shared among them. It clears its timeouts afterwards; the caller sets its own.
pub(crate) fn open(
    client: &redis::Client,
    budget: Duration,
) -> Result<redis::Connection, NetError> {
    let settings = client.get_connection_info().redis_settings();
    let replies = u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
    Ok(client.get_connection_with_timeout(budget / replies.max(1))?)
}

/// `ASKING`, sent before each keyed request of a leg redirected with `ASK`.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// Writes every request at once.
pub(crate) fn send<R: Request>(
    conn: &mut redis::Connection,
    requests: &[&R],
    asking: bool,
    deadline: Instant,
) -> Result<(), RedisError> {
    // The read timeout is set before each reply is read.
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_micros(100) {
        return Err(NetError::timeout().into_redis());
    }
    conn.set_write_timeout(Some(left))?;
    let mut buf = Vec::with_capacity(256);
    for r in requests {
        if asking && r.slot().is_some() {
            buf.extend_from_slice(ASKING);
        }
        r.write(&mut buf);
    }
    conn.send_packed_command(&buf)
}

/// Reads the replies to `requests`, re-sending those whose reply asks for another form (a
/// script the server lost), and every request without keys after them.
pub(crate) fn receive<R: Request>(
    conn: &mut redis::Connection,
    requests: &[&R],
    asking: bool,
    deadline: Instant,
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut values = Vec::with_capacity(requests.len());
    for r in requests {
        // Replies are read one node after another: when a slow node used up the deadline,
        // the replies that other nodes sent in time are still collected, with a token wait.
        let left = deadline.saturating_duration_since(Instant::now());
        conn.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        if asking && r.slot().is_some() {
            conn.recv_response()?;
        }
        values.push(conn.recv_response()?);
    }
    let mut results = Vec::with_capacity(values.len());
    let mut resent = false;
    for (r, value) in requests.iter().zip(values) {
        let again = match r.resend(&value) {
            Some(packed) => Some(packed),
            None if resent && r.slot().is_none() => {
                let mut packed = Vec::new();
                r.write(&mut packed);
                Some(packed)
            }
            None => None,
        };
        let value = match again {
            Some(packed) => {
                resent = true;
                set_timeouts(conn, deadline).map_err(NetError::into_redis)?;
                let mut buf = Vec::new();
                if asking && r.slot().is_some() {
                    buf.extend_from_slice(ASKING);
                }
                buf.extend_from_slice(&packed);
                conn.send_packed_command(&buf)?;
                if asking && r.slot().is_some() {
                    conn.recv_response()?;
                }
                conn.recv_response()?
            }
            None => value,
        };
        results.push(value.extract_error());
    }
    Ok(results)
}
