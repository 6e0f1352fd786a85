//! A connection of our own, plain TCP or TLS, whose socket a round can wait on together with
//! the others'.
//!
//! redis-rs's blocking `Connection` keeps its socket to itself, and its parser may hold a
//! reply it has read ahead: a round over several nodes could only read their replies one node
//! after another, and so waited for the first nodes in its list rather than for the first
//! replies. This connection keeps the socket and the bytes read so far, so that the fan-out
//! can wait on every node at once (`poll(2)`) and read whichever answered. It is used for
//! `redis://`, `rediss://` and `unix://` servers (TLS through [`Session`], which reads the
//! socket one read at a time and hands over all the plaintext that read completed, so that
//! nothing waits inside the TLS layer unseen).
//!
//! Over TCP it sets `TCP_NODELAY` (redis-rs leaves Nagle's algorithm on). It behaves as
//! redis-rs's does where the rest of the transport relies on it: the same handshake (`AUTH`,
//! retried without the user name for a server that takes none, then `SELECT`), the same
//! errors, and a reply whose read failed (a timeout, an interrupted read) is dropped when it
//! comes, so that it is never taken for a later request's. Replies are framed here and read
//! one whole reply at a time: the kinds a lock's replies are made of by `frame.rs`'s
//! `simple_value`, anything else (errors among them) by redis-rs's own parser.

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
#[cfg(unix)]
use std::path::Path;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, ErrorKind, RedisConnectionInfo, RedisError, RedisResult, Value};

use super::frame::{frame, simple_value};
use super::socket::Socket;
use super::tls_session::{Config, Session};

/// The read buffer's first size; it grows to hold the largest reply.
const BUF_SIZE: usize = 4096;

pub(crate) struct Plain {
    sock: Socket,
    /// The TLS session of a `rediss://` server.
    tls: Option<Box<Session>>,
    /// Bytes read and not yet handed out: `buf[start..end]`.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Replies to drop when they come: their reads failed and the callers gave up on them.
    skip: usize,
    db: i64,
    open: bool,
    /// redis-rs's reply parser, for the replies `simple_value` leaves to it, kept with the
    /// connection: one made per reply would allocate and fill an 8 KiB read buffer each time.
    parser: redis::Parser,
}

impl Plain {
    /// Connects to `host:port`, over TLS with `tls`, and runs the handshake `settings` ask
    /// for (credentials, database), all within `budget`.
    pub(crate) fn connect(
        host: &str,
        port: u16,
        tls: Option<&Config>,
        settings: &RedisConnectionInfo,
        budget: Duration,
    ) -> RedisResult<Plain> {
        let deadline = Instant::now() + budget;
        let ip = host.trim_start_matches('[').trim_end_matches(']');
        if ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified())
        {
            return Err((
                ErrorKind::InvalidClientConfig,
                "Cannot connect to a wildcard address (0.0.0.0 or ::)",
            )
                .into());
        }
        let mut last = None;
        let mut sock = None;
        for addr in (host, port).to_socket_addrs()? {
            match super::socket::connect_tcp(&addr, left(deadline)?) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let sock = match (sock, last) {
            (Some(sock), _) => sock,
            (None, Some(e)) => return Err(e.into()),
            (None, None) => {
                return Err(io::Error::other("could not resolve to any addresses").into());
            }
        };
        // Every request is one write, and waits for nothing: Nagle's algorithm could only
        // hold it back, behind a request to the same node whose reply has not come (a round
        // written behind a slower node's late reply).
        sock.set_nodelay(true)?;
        let sock = Socket::tcp(sock);
        let tls = match tls {
            Some(config) => {
                let left = left(deadline)?;
                sock.set_read_timeout(Some(left))?;
                sock.set_write_timeout(Some(left))?;
                Some(Box::new(Session::start(config, ip, &sock)?))
            }
            None => None,
        };
        Plain::over(sock, tls, settings, deadline)
    }

    /// Connects to the Unix socket at `path` and runs the handshake `settings` ask for, within
    /// `budget`.
    #[cfg(unix)]
    pub(crate) fn connect_unix(
        path: &Path,
        settings: &RedisConnectionInfo,
        budget: Duration,
    ) -> RedisResult<Plain> {
        let deadline = Instant::now() + budget;
        let sock = std::os::unix::net::UnixStream::connect(path)?;
        Plain::over(Socket::unix(sock), None, settings, deadline)
    }

    /// A connection on `sock`, once the handshake ran by `deadline`.
    pub(super) fn over(
        sock: Socket,
        tls: Option<Box<Session>>,
        settings: &RedisConnectionInfo,
        deadline: Instant,
    ) -> RedisResult<Plain> {
        let mut conn = Plain {
            sock,
            tls,
            buf: vec![0; BUF_SIZE],
            start: 0,
            end: 0,
            skip: 0,
            db: settings.db(),
            open: true,
            parser: redis::Parser::new(),
        };
        conn.handshake(settings, deadline)?;
        conn.set_read_timeout(None)?;
        conn.set_write_timeout(None)?;
        Ok(conn)
    }

    /// `AUTH` and `SELECT`, as redis-rs sends them, each reply read with the time left.
    fn handshake(&mut self, settings: &RedisConnectionInfo, deadline: Instant) -> RedisResult<()> {
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            let mut reply = self.setup_call(&auth, deadline)?;
            if settings.username().is_some() && wants_no_user(&reply) {
                reply = self.setup_call(redis::cmd("AUTH").arg(password), deadline)?;
            }
            if !matches!(reply, Value::Okay) {
                return Err((
                    ErrorKind::AuthenticationFailed,
                    "Password authentication failed",
                )
                    .into());
            }
        }
        if settings.db() != 0 {
            let reply = self.setup_call(redis::cmd("SELECT").arg(settings.db()), deadline)?;
            if let Value::ServerError(e) = reply {
                let kind = redis::ServerErrorKind::ResponseError.into();
                let what = "Redis server refused to switch database";
                return Err(match e.details() {
                    Some(why) => (kind, what, why.to_owned()).into(),
                    None => (kind, what).into(),
                });
            }
        }
        Ok(())
    }

    fn setup_call(&mut self, cmd: &redis::Cmd, deadline: Instant) -> RedisResult<Value> {
        let left = left(deadline)?;
        self.set_write_timeout(Some(left))?;
        self.set_read_timeout(Some(left))?;
        self.send_packed_command(&cmd.get_packed_command())?;
        self.recv_response()
    }

    pub(crate) fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        let written = match &mut self.tls {
            None => (&self.sock).write_all(cmd),
            Some(tls) => tls.write(&self.sock, cmd),
        };
        written.map_err(|e| {
            let e = RedisError::from(e);
            if e.is_unrecoverable_error() {
                self.open = false;
            }
            e
        })
    }

    /// The next reply, waiting for it as long as the read timeout allows. When that fails
    /// (but for the end of the connection), the reply is dropped when it comes.
    pub(crate) fn recv_response(&mut self) -> RedisResult<Value> {
        loop {
            if let Some(len) = frame(&self.buf[self.start..self.end])? {
                let at = self.start;
                self.start += len;
                let reply = &self.buf[at..at + len];
                let value = match simple_value(reply) {
                    Some(v) => Ok(v),
                    None => self.parser.parse_value(reply),
                };
                if value.is_err() {
                    // What it buffered of a malformed reply must not precede the next one.
                    self.parser = redis::Parser::new();
                }
                if self.start == self.end {
                    (self.start, self.end) = (0, 0);
                }
                if self.skip > 0 {
                    self.skip -= 1;
                    continue;
                }
                return value;
            }
            match self.read_some() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.close();
                    return Err(e.into());
                }
                Err(e) => {
                    self.skip += 1;
                    return Err(e.into());
                }
            }
        }
    }

    /// Reads what the socket holds (waiting for it as the read timeout allows); the end of
    /// the connection is an `UnexpectedEof` error. Over TLS, one read of the socket and all
    /// the plaintext it completed (none when it completed no record).
    fn read_some(&mut self) -> io::Result<()> {
        let want = match &mut self.tls {
            None => 1,
            Some(tls) => match tls.receive(&self.sock)? {
                0 => return Ok(()),
                n => n,
            },
        };
        self.room(want);
        let n = match &mut self.tls {
            None => (&self.sock).read(&mut self.buf[self.end..])?,
            Some(tls) => tls.take(&mut self.buf[self.end..]),
        };
        match n {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                self.end += n;
                Ok(())
            }
        }
    }

    /// Makes room for `n` more bytes after `end`.
    fn room(&mut self, n: usize) {
        if self.buf.len() - self.end >= n {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let need = self.end + n;
        if self.buf.len() < need {
            self.buf.resize(need.next_power_of_two(), 0);
        }
    }

    /// After `poll(2)` found the socket readable: reads what came, without waiting. An error
    /// (the connection ended) is left for the next [`recv_response`](Self::recv_response) to
    /// report, which reads again.
    pub(crate) fn fill(&mut self) -> bool {
        self.read_some().is_ok()
    }

    /// Whether the next `n` replies (past those to be dropped) have all come.
    pub(crate) fn holds(&self, n: usize) -> bool {
        let mut rest = &self.buf[self.start..self.end];
        for _ in 0..n + self.skip {
            match frame(rest) {
                Ok(Some(len)) => rest = &rest[len..],
                // A malformed reply is for `recv_response` to report.
                Err(_) => return true,
                Ok(None) => return false,
            }
        }
        true
    }

    /// The socket, to wait on for replies.
    pub(crate) fn socket(&self) -> &Socket {
        &self.sock
    }

    pub(crate) fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        Ok(self.sock.set_read_timeout(dur)?)
    }

    pub(crate) fn set_write_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        Ok(self.sock.set_write_timeout(dur)?)
    }

    fn close(&mut self) {
        let _ = self.sock.shutdown();
        self.open = false;
    }
}

impl ConnectionLike for Plain {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send_packed_command(cmd)?;
        self.recv_response()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        // As redis-rs reads a pipeline: every reply, so that the connection stays in step;
        // the first failure, or an error reply before `offset` (a transaction's), stands.
        self.send_packed_command(cmd)?;
        let mut values = Vec::with_capacity(count);
        let mut first_err = None;
        for i in 0..offset + count {
            match self.recv_response() {
                Ok(Value::ServerError(e)) if i < offset => {
                    first_err.get_or_insert(e.into());
                }
                Ok(value) if i >= offset => values.push(value),
                Ok(_) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(values),
        }
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

/// The time left until `deadline`, or a timeout error.
fn left(deadline: Instant) -> RedisResult<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "Connection timed out").into())
}

/// An `AUTH user password` refused by a server that takes no user name (before Redis 6).
fn wants_no_user(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e)
        if e.details().is_some_and(|d| d.contains("wrong number of arguments for 'auth' command")))
}

#[cfg(test)]
mod tests;
