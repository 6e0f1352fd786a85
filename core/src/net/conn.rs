//! One blocking connection: opening it within a budget, its deadlines, and pipelined
//! requests written at once and read back reply by reply.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionLike, RedisError, RedisResult, Value};

use super::plain::Plain;
use super::poll::CAN_POLL;
use super::socket::Socket;
use super::tls_session::Config;
use crate::wire::NetError;
use crate::wire::Request;

/// A connection's transport: a connection of our own (TCP, TLS or a Unix socket), whose
/// socket a round can wait on together with the others' (see `plain.rs`), or redis-rs's (TLS
/// when no configuration of our own could be made).
pub(crate) enum Io {
    Plain(Plain),
    Redis(redis::Connection),
}

/// A set-up connection, with the server's id for it (`CLIENT ID`): another connection ends a
/// blocking command on this one early by that id (`CLIENT UNBLOCK`), without dropping it.
pub(crate) struct Connection {
    io: Io,
    /// `None` when the server would not say (an ACL user without `client|id`).
    pub(crate) id: Option<i64>,
    /// Replies still to come for requests whose round ended without them (at its quorum),
    /// oldest first: how many, and when their requests were written. Read before the
    /// connection's next reply, or earlier once they must have come (see
    /// [`settle_sent_before`](Self::settle_sent_before)).
    owed: VecDeque<(Instant, u32)>,
    /// The socket's read and write timeouts as last set through this wrapper (`None`: not
    /// known), so that a round whose deadline is as far off as the last one's sets none.
    read_timeout: Cell<Option<Duration>>,
    write_timeout: Cell<Option<Duration>>,
    /// The buffer requests are packed in, kept between rounds (as large as the largest
    /// request sent: a script's full text after a `NOSCRIPT`, a few KiB).
    out: Vec<u8>,
    /// Counts it among its endpoint's open connections while it lives.
    _counted: Option<Counted>,
}

/// Counts a connection in its endpoint's open connections until it is dropped.
struct Counted(Arc<AtomicU64>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Socket timeouts are set in whole milliseconds, rounded up: the kernel counts them in
/// scheduler ticks anyway, and a round whose deadline lies as far off as the previous one's
/// then finds the socket already set (one `setsockopt` call fewer per direction and round).
fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_nanos().div_ceil(1_000_000).max(1) as u64)
}

/// Sets a socket timeout with `set` (in whole milliseconds) unless `last` says the socket has
/// it already; `last` is unknown while the call runs and when it fails.
fn set_once(
    last: &Cell<Option<Duration>>,
    timeout: Option<Duration>,
    set: impl FnOnce(Option<Duration>) -> RedisResult<()>,
) -> RedisResult<()> {
    let timeout = timeout.map(whole_ms);
    if last.get() != timeout || timeout.is_none() {
        last.set(None);
        set(timeout)?;
        last.set(timeout);
    }
    Ok(())
}

impl Connection {
    pub(crate) fn new(io: Io, id: Option<i64>) -> Connection {
        Connection {
            io,
            id,
            owed: VecDeque::new(),
            read_timeout: Cell::new(None),
            write_timeout: Cell::new(None),
            out: Vec::new(),
            _counted: None,
        }
    }

    /// Counts this connection in `open` until it is dropped.
    pub(crate) fn count_in(&mut self, open: &Arc<AtomicU64>) {
        open.fetch_add(1, Ordering::Relaxed);
        self._counted = Some(Counted(Arc::clone(open)));
    }

    /// The transport, as redis-rs's requests take it.
    fn io(&self) -> &dyn ConnectionLike {
        match &self.io {
            Io::Plain(io) => io,
            Io::Redis(io) => io,
        }
    }

    fn io_mut(&mut self) -> &mut dyn ConnectionLike {
        match &mut self.io {
            Io::Plain(io) => io,
            Io::Redis(io) => io,
        }
    }

    /// Bounds the next reads by `timeout` (at least 1 ms, rounded up to whole milliseconds).
    /// Every read timeout of a wrapped connection is set here: this method shadows redis-rs's.
    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> RedisResult<()> {
        set_once(&self.read_timeout, timeout, |t| match &self.io {
            Io::Plain(io) => io.set_read_timeout(t),
            Io::Redis(io) => io.set_read_timeout(t),
        })
    }

    /// Bounds the next writes by `timeout`, as [`set_read_timeout`](Self::set_read_timeout).
    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> RedisResult<()> {
        set_once(&self.write_timeout, timeout, |t| match &self.io {
            Io::Plain(io) => io.set_write_timeout(t),
            Io::Redis(io) => io.set_write_timeout(t),
        })
    }

    /// Writes `cmd` (packed commands) at once.
    pub(crate) fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        match &mut self.io {
            Io::Plain(io) => io.send_packed_command(cmd),
            Io::Redis(io) => io.send_packed_command(cmd),
        }
    }

    /// Reads the next reply, waiting for it as long as the read timeout allows. A reply whose
    /// read failed (a timeout) is dropped when it comes, never taken for a later request's.
    pub(crate) fn recv_response(&mut self) -> RedisResult<Value> {
        match &mut self.io {
            Io::Plain(io) => io.recv_response(),
            Io::Redis(io) => io.recv_response(),
        }
    }

    /// Whether a round can wait on this connection's socket (with [`socket`], [`fill`] and
    /// [`holds`]): our own connections, where `poll(2)` is used; redis-rs's are read in turn.
    ///
    /// [`socket`]: Self::socket
    /// [`fill`]: Self::fill
    /// [`holds`]: Self::holds
    pub(crate) fn can_wait(&self) -> bool {
        CAN_POLL && matches!(self.io, Io::Plain(_))
    }

    /// Whether the server closed this idle connection (it owes no reply, yet its socket has
    /// something to read: the end of the stream, or a reset). Seen before a request is
    /// written, that request never runs; seen after, it may have run.
    pub(crate) fn closed_by_server(&self) -> bool {
        self.owed() == 0
            && match &self.io {
                Io::Plain(io) => io.holds(1) || super::poll::readable_now(io.socket()),
                Io::Redis(_) => false,
            }
    }

    /// The server end of this connection (see [`Socket::peer`]); `None` for redis-rs's.
    pub(crate) fn peer(&self) -> Option<String> {
        self.socket().and_then(Socket::peer)
    }

    /// The socket a round waits on for this connection's replies; `None` for redis-rs's.
    pub(crate) fn socket(&self) -> Option<&Socket> {
        match &self.io {
            Io::Plain(io) => Some(io.socket()),
            Io::Redis(_) => None,
        }
    }

    /// After `poll(2)` found the socket readable: takes in what came, without waiting. `false`
    /// when the connection failed (the next read reports how).
    pub(crate) fn fill(&mut self) -> bool {
        match &mut self.io {
            Io::Plain(io) => io.fill(),
            Io::Redis(_) => true,
        }
    }

    /// Whether the replies this connection owes and `n` more have all come (`true` for
    /// redis-rs's connections, which cannot tell).
    pub(crate) fn holds(&self, n: usize) -> bool {
        match &self.io {
            Io::Plain(io) => io.holds(self.owed() as usize + n),
            Io::Redis(_) => true,
        }
    }

    /// Notes `n` more replies to come, to requests written just now.
    pub(crate) fn owe(&mut self, n: u32) {
        if n > 0 {
            self.owed.push_back((Instant::now(), n));
        }
    }

    /// How many replies are still to come.
    pub(crate) fn owed(&self) -> u32 {
        self.owed.iter().map(|(_, n)| n).sum()
    }

    /// How many rounds' replies are still to come (a round may be several requests).
    pub(crate) fn owed_rounds(&self) -> usize {
        self.owed.len()
    }

    /// Reads (and drops) the replies still to come, waiting for them until `deadline`. An
    /// error when they did not all come: the connection is then out of step and must be
    /// dropped.
    pub(crate) fn settle_owed(&mut self, deadline: Instant) -> RedisResult<()> {
        self.settle_sent_before(None, deadline)
    }

    /// Like [`settle_owed`](Self::settle_owed), for the replies to requests written before
    /// `before` only (all with `None`): those of a node whose replies take a known time have
    /// come by then, and reading them costs no wait.
    pub(crate) fn settle_sent_before(
        &mut self,
        before: Option<Instant>,
        deadline: Instant,
    ) -> RedisResult<()> {
        while let Some(&(sent, _)) = self.owed.front() {
            if before.is_some_and(|before| sent >= before) {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            self.set_read_timeout(Some(left))?;
            self.read_owed()?;
        }
        Ok(())
    }

    /// Reads (and drops) the replies still to come that the connection has taken in already
    /// (a round that waited on its socket takes in whatever came on it), without a system
    /// call: what a connection left behind by rounds that ended at their quorum owes then
    /// stays what is in flight, however slow its server, and the round that leaves it behind
    /// ends without reading its socket once more. Only our own connections can tell what has
    /// come.
    pub(crate) fn settle_taken_in(&mut self) -> RedisResult<()> {
        while self.owed() > 0 && matches!(&self.io, Io::Plain(io) if io.holds(1)) {
            self.read_owed()?;
        }
        Ok(())
    }

    /// Reads the oldest reply still to come.
    fn read_owed(&mut self) -> RedisResult<()> {
        self.recv_response()?;
        if let Some((_, n)) = self.owed.front_mut() {
            *n -= 1;
            if *n == 0 {
                self.owed.pop_front();
            }
        }
        Ok(())
    }
}

/// `.query()` on a connection, whichever its transport.
impl ConnectionLike for Connection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.io_mut().req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.io_mut().req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.io().get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.io_mut().check_connection()
    }

    fn is_open(&self) -> bool {
        self.io().is_open()
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
pub(crate) fn set_timeouts(conn: &Connection, deadline: Instant) -> Result<(), NetError> {
    let left = remaining(deadline)?;
    conn.set_read_timeout(Some(left))?;
    conn.set_write_timeout(Some(left))?;
    Ok(())
}

/// Opens a connection of `client` within `budget`. A `redis://` or `unix://` server, and a
/// `rediss://` one given the configuration `tls`, get a connection of our own
/// ([`Io::Plain`]), whose connect and handshake each take the time left of the whole budget.
/// Otherwise (TLS without a configuration of our own) it is redis-rs's, which bounds the TCP
/// connect and then each handshake reply (`AUTH`, `SELECT`) by the timeout it is given, one
/// after another, so the budget is shared among them. It clears its timeouts afterwards; the
/// caller sets its own.
pub(crate) fn open(
    client: &redis::Client,
    tls: Option<&Config>,
    budget: Duration,
) -> Result<Io, NetError> {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    let own = match info.addr() {
        ConnectionAddr::Tcp(host, port) => Plain::connect(host, *port, None, settings, budget),
        ConnectionAddr::TcpTls { host, port, .. } if tls.is_some() => {
            Plain::connect(host, *port, tls, settings, budget)
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => Plain::connect_unix(path, settings, budget),
        _ => {
            let replies = u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
            let conn = client.get_connection_with_timeout(budget / replies.max(1))?;
            return Ok(Io::Redis(conn));
        }
    };
    Ok(Io::Plain(own?))
}

/// `ASKING`, sent before each keyed request of a leg redirected with `ASK`.
const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";

/// Writes every request at once.
pub(crate) fn send<R: Request>(
    conn: &mut Connection,
    requests: &[R],
    asking: bool,
    deadline: Instant,
) -> Result<(), RedisError> {
    // The read timeout is set before each reply is read.
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_micros(100) {
        return Err(NetError::timeout().into_redis());
    }
    conn.set_write_timeout(Some(left))?;
    let mut buf = std::mem::take(&mut conn.out);
    buf.clear();
    for r in requests {
        if asking && r.slot().is_some() {
            buf.extend_from_slice(ASKING);
        }
        r.write(&mut buf);
    }
    let sent = conn.send_packed_command(&buf);
    conn.out = buf;
    sent
}

/// Reads the replies to `requests`, re-sending those whose reply asks for another form (a
/// script the server lost), and every request without keys after them.
pub(crate) fn receive<R: Request>(
    conn: &mut Connection,
    requests: &[R],
    asking: bool,
    deadline: Instant,
) -> RedisResult<Vec<RedisResult<Value>>> {
    // The replies as read, then each in its final form, in place.
    let mut results: Vec<RedisResult<Value>> = Vec::with_capacity(requests.len());
    for r in requests {
        // Replies are read one node after another: when a slow node used up the deadline,
        // the replies that other nodes sent in time are still collected, with a token wait.
        let left = deadline.saturating_duration_since(Instant::now());
        conn.set_read_timeout(Some(left))?;
        if asking && r.slot().is_some() {
            conn.recv_response()?;
        }
        results.push(Ok(conn.recv_response()?));
    }
    // Only an error reply asks for its request in another form.
    if results
        .iter()
        .any(|v| matches!(v, Ok(Value::ServerError(_))))
    {
        resend_where_asked(conn, requests, asking, deadline, &mut results)?;
    }
    for result in &mut results {
        if let Ok(value) = std::mem::replace(result, Ok(Value::Nil)) {
            *result = value.extract_error();
        }
    }
    Ok(results)
}

/// Sends again, and reads the new replies of, the requests whose reply asks for another form,
/// and every request without keys after the first of them.
#[cold]
#[inline(never)]
fn resend_where_asked<R: Request>(
    conn: &mut Connection,
    requests: &[R],
    asking: bool,
    deadline: Instant,
    results: &mut [RedisResult<Value>],
) -> RedisResult<()> {
    let mut resent = false;
    for (r, result) in requests.iter().zip(results) {
        let Ok(value) = std::mem::replace(result, Ok(Value::Nil)) else {
            continue;
        };
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
        *result = Ok(value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_whole_milliseconds() {
        let ms = Duration::from_millis;
        assert_eq!(whole_ms(Duration::ZERO), ms(1));
        assert_eq!(whole_ms(Duration::from_micros(1)), ms(1));
        assert_eq!(whole_ms(ms(250)), ms(250));
        // A deadline a few microseconds nearer than the last round's sets the same value.
        assert_eq!(whole_ms(ms(250) - Duration::from_micros(7)), ms(250));
        assert_eq!(whole_ms(ms(250) + Duration::from_nanos(1)), ms(251));
    }
}
