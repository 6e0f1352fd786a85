//! One Redis node: its address and a small pool of blocking connections.
//!
//! A connection is used by one thread at a time: it is taken out of the pool for one exchange
//! and put back only when the exchange ended cleanly. A connection that timed out or broke is
//! dropped, never reused, so a late reply can never be read as the answer to a new request.

use std::io;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError};

use crate::error::Error;
use crate::scripts;

/// Idle connections older than this are closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// At most this many idle connections are kept per node.
const MAX_IDLE: usize = 64;

pub(crate) struct Node {
    client: redis::Client,
    display: String,
    client_name: String,
    connect_timeout: Duration,
    pool: Mutex<Pool>,
}

struct Pool {
    /// The process that opened the idle connections: a forked child must not share them.
    pid: u32,
    idle: Vec<(redis::Connection, Instant)>,
}

impl Node {
    pub(crate) fn open(
        url: &str,
        client_name: &str,
        connect_timeout: Duration,
    ) -> Result<Node, Error> {
        let info: ConnectionInfo = url
            .into_connection_info()
            .map_err(|e| Error::invalid(format!("malformed Redis URL {}: {e}", redact(url))))?;
        let display = describe(&info);
        let client = redis::Client::open(info)
            .map_err(|e| Error::invalid(format!("unusable Redis URL {display}: {e}")))?;
        Ok(Node {
            client,
            display,
            client_name: client_name.to_owned(),
            connect_timeout,
            pool: Mutex::new(Pool {
                pid: std::process::id(),
                idle: Vec::new(),
            }),
        })
    }

    /// The node's address without credentials, for reports and logs.
    pub(crate) fn name(&self) -> &str {
        &self.display
    }

    /// An idle connection, if there is one (the most recently used: it is the likeliest alive).
    pub(crate) fn take(&self) -> Option<redis::Connection> {
        let mut pool = self.pool.lock();
        let pid = std::process::id();
        if pool.pid != pid {
            // A forked child: the sockets belong to the parent's conversation with Redis.
            // Closing our copies of the descriptors does not disturb the parent.
            pool.idle.clear();
            pool.pid = pid;
        }
        pool.idle.pop().map(|(c, _)| c)
    }

    /// Returns a connection that finished its exchange cleanly.
    pub(crate) fn put(&self, conn: redis::Connection) {
        let now = Instant::now();
        let mut pool = self.pool.lock();
        if pool.pid != std::process::id() {
            return;
        }
        pool.idle
            .retain(|(_, since)| now.duration_since(*since) < IDLE_TIMEOUT);
        if pool.idle.len() < MAX_IDLE {
            pool.idle.push((conn, now));
        }
    }

    /// Opens a new connection within `deadline`: connect, name it, load the scripts.
    pub(crate) fn connect(&self, deadline: Instant) -> Result<redis::Connection, RedisError> {
        let budget = remaining(deadline)?.min(self.connect_timeout);
        let mut conn = self.client.get_connection_with_timeout(budget)?;
        // redis-rs clears its timeouts after connecting; a blocking client must never wait
        // without a bound.
        set_timeouts(&conn, deadline)?;
        let mut setup = redis::pipe();
        setup
            .cmd("CLIENT")
            .arg("SETNAME")
            .arg(&self.client_name)
            .ignore();
        for s in scripts::all() {
            setup.cmd("SCRIPT").arg("LOAD").arg(s.source()).ignore();
        }
        setup.query::<()>(&mut conn)?;
        Ok(conn)
    }
}

/// The time left until `deadline`, or a timeout error when there is none.
pub(crate) fn remaining(deadline: Instant) -> Result<Duration, RedisError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_micros(100) {
        Err(timed_out())
    } else {
        Ok(left)
    }
}

pub(crate) fn timed_out() -> RedisError {
    RedisError::from(io::Error::new(io::ErrorKind::TimedOut, "no answer in time"))
}

/// Bounds both directions of `conn` by `deadline`.
pub(crate) fn set_timeouts(conn: &redis::Connection, deadline: Instant) -> Result<(), RedisError> {
    let left = remaining(deadline)?;
    conn.set_read_timeout(Some(left))?;
    conn.set_write_timeout(Some(left))?;
    Ok(())
}

/// `scheme://[user@]host:port/db`, never the password.
fn describe(info: &ConnectionInfo) -> String {
    let redis = info.redis_settings();
    let (scheme, addr) = match info.addr() {
        ConnectionAddr::Tcp(h, p) => ("redis", format!("{h}:{p}")),
        ConnectionAddr::TcpTls { host, port, .. } => ("rediss", format!("{host}:{port}")),
        ConnectionAddr::Unix(path) => ("unix", path.display().to_string()),
        _ => ("redis", info.addr().to_string()),
    };
    let user = redis
        .username()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = if redis.db() != 0 {
        format!("/{}", redis.db())
    } else {
        String::new()
    };
    format!("{scheme}://{user}{addr}{db}")
}

/// A URL with any password replaced, for error messages about URLs that did not parse.
pub(crate) fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((creds, host)) = rest.rsplit_once('@')
    {
        let user = creds.split(':').next().unwrap_or("");
        return format!("{scheme}://{user}:***@{host}");
    }
    url.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_never_shows_the_password() {
        let n = Node::open(
            "redis://alice:s3cret@127.0.0.1:7000/2",
            "t",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(n.name(), "redis://alice@127.0.0.1:7000/2");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
    }

    #[test]
    fn malformed_urls_are_invalid_arguments() {
        for url in ["", "nonsense", "http://x:1", "redis://:pw@[::1:7000"] {
            let err = Node::open(url, "t", Duration::from_secs(1)).err().unwrap();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{url}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
    }
}
