//! What a node answered: its replies, or what went wrong between the client and the server,
//! typed where it happened. The transport makes these; the lock protocol's machines read them.

use std::fmt;
use std::io;
use std::sync::Arc;

use redis::{RedisError, Value};

/// What one node answered: one reply per request, or why it could not be asked.
pub type Answer = Result<Vec<Result<Value, NetError>>, NetError>;

/// The kinds of failure the transport reports. Callers decide by these, never by message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer by the deadline: the server is slow, frozen, or the network is.
    Timeout,
    /// The connection was refused: nothing listens there (a server that is down or
    /// restarting, or a Unix socket that does not exist).
    Refused,
    /// An established connection broke (reset, closed by the server or a proxy).
    Dropped,
    /// The server's TLS certificate did not verify.
    TlsUnverified,
    /// The server refused our credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`).
    Auth,
    /// The server answered with an error.
    Server,
    /// The server is set up in a way the layer above refuses (see `endpoint::Probe`).
    Unsuitable,
    /// Any other failure to talk to the server (a name that does not resolve, a master in
    /// the middle of a failover, a reply that could not be read).
    Io,
}

/// One failure of the transport: its kind, the server it happened at when the node is made
/// of several (a cluster master), and the underlying redis error.
#[derive(Debug, Clone)]
pub struct NetError {
    failure: Failure,
    at: Option<Arc<str>>,
    source: RedisError,
    /// Whether `source` says more than the kind does (not one of our own deadlines).
    detailed: bool,
    /// What was to follow the failed request on its connection could not be written.
    followup_lost: bool,
}

impl NetError {
    /// No answer by the deadline.
    pub fn timeout() -> NetError {
        NetError {
            failure: Failure::Timeout,
            at: None,
            source: RedisError::from(io::Error::new(io::ErrorKind::TimedOut, NO_ANSWER)),
            detailed: false,
            followup_lost: false,
        }
    }

    /// A failure of our own making, of the given kind, with a sentence saying what happened.
    pub fn new(failure: Failure, io_kind: io::ErrorKind, what: String) -> NetError {
        NetError {
            failure,
            at: None,
            source: RedisError::from(io::Error::new(io_kind, what)),
            detailed: true,
            followup_lost: false,
        }
    }

    /// The same failure, said to have happened at the server `at` (a cluster's master).
    pub(crate) fn at(mut self, at: &str) -> NetError {
        self.at = Some(at.into());
        self
    }

    /// Whether the request that was to follow the failed one on its connection (an undo)
    /// could not be written: the connection broke, and the server must be reached another
    /// way if the failed request may have run.
    pub(crate) fn followup_lost(&self) -> bool {
        self.followup_lost
    }

    pub(crate) fn lose_followup(&mut self) {
        self.followup_lost = true;
    }

    pub(crate) fn failure(&self) -> Failure {
        self.failure
    }

    pub(crate) fn into_redis(self) -> RedisError {
        self.source
    }
}

impl NetError {
    /// A failure of kind `failure` that redis-rs reported as `e` (the transport tells the
    /// kind: see `net/classify.rs`).
    pub(crate) fn of_redis(failure: Failure, e: RedisError) -> NetError {
        NetError {
            failure,
            at: None,
            source: e,
            detailed: true,
            followup_lost: false,
        }
    }
}

/// How a server that did not answer by the deadline is reported.
const NO_ANSWER: &str = "timed out: no answer in time";

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(at) = &self.at {
            write!(f, "master {at}: ")?;
        }
        match (self.failure, self.detailed) {
            (Failure::Timeout, false) => f.write_str(NO_ANSWER),
            // A socket timeout reads "Resource temporarily unavailable (os error 11)".
            (Failure::Timeout, true) => write!(f, "{NO_ANSWER} ({})", self.source),
            (Failure::TlsUnverified, _) => {
                write!(f, "TLS certificate verification failed: {}", self.source)
            }
            // The server's error as it sent it (`BUSY Redis is busy …`, `NOPERM …`), not as
            // redis-rs names its kind (`"BUSY": …`, `ResponseError: …`, `NoPerm: …`).
            (Failure::Server | Failure::Auth, _) => {
                match (self.source.code(), self.source.detail()) {
                    (Some(code), Some(detail)) => write!(f, "{code} {detail}"),
                    (Some(code), None) => f.write_str(code),
                    _ => write!(f, "{}", self.source),
                }
            }
            _ => write!(f, "{}", self.source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_reads_as_one() {
        assert_eq!(NetError::timeout().to_string(), NO_ANSWER);
        // What a socket read past its timeout fails with.
        let socket = NetError::from(RedisError::from(io::Error::from(io::ErrorKind::WouldBlock)));
        assert_eq!(socket.failure(), Failure::Timeout);
        assert!(
            socket
                .to_string()
                .starts_with("timed out: no answer in time (")
        );
        let at = NetError::timeout().at("127.0.0.1:7000");
        assert_eq!(
            at.to_string(),
            "master 127.0.0.1:7000: timed out: no answer in time"
        );
    }

    #[test]
    fn kinds_come_from_the_error_not_its_text() {
        let io = |k| NetError::from(RedisError::from(io::Error::from(k))).failure();
        assert_eq!(io(io::ErrorKind::ConnectionRefused), Failure::Refused);
        assert_eq!(io(io::ErrorKind::ConnectionReset), Failure::Dropped);
        assert_eq!(io(io::ErrorKind::Other), Failure::Io);
        let server = |text: &str| {
            let reply = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
            NetError::from(reply.extract_error().unwrap_err()).failure()
        };
        assert_eq!(
            server("WRONGPASS invalid username-password pair"),
            Failure::Auth
        );
        assert_eq!(server("NOPERM no permission"), Failure::Auth);
        assert_eq!(server("OOM command not allowed"), Failure::Server);
    }
}
