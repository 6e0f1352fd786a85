//! The error type: one `Error` with a small, stable set of kinds.

use std::fmt;

use crate::wire::{Failure, NetError};

/// What went wrong, in a small and stable set of kinds.
///
/// Every kind maps 1:1 to a C result code and a Python exception class, so new kinds are added
/// only at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The lock is held by someone else and the wait (if any) ran out.
    WouldBlock,
    /// Fewer than a quorum of nodes agreed; see [`Error::nodes`] for what each node said.
    NoQuorum,
    /// The lock was lost: it expired, or another owner's value replaced ours.
    Lost,
    /// The guard no longer holds the lock because it was already released.
    NotHeld,
    /// A node could not be reached, or the connection broke or timed out.
    Connection,
    /// A node refused our credentials (`WRONGPASS`, `NOAUTH`, `NOPERM`).
    Auth,
    /// A node answered with an error (for example `OOM`, `READONLY`, `WRONGTYPE`).
    Server,
    /// An argument was rejected before anything was sent to Redis.
    InvalidArgument,
    /// The caller's interrupt check asked a blocking wait to stop (for example Ctrl-C).
    Interrupted,
}

impl ErrorKind {
    /// A short, stable, lower-case name (`"no quorum"`, `"lost"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::WouldBlock => "would block",
            ErrorKind::NoQuorum => "no quorum",
            ErrorKind::Lost => "lost",
            ErrorKind::NotHeld => "not held",
            ErrorKind::Connection => "connection",
            ErrorKind::Auth => "authentication",
            ErrorKind::Server => "server",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::Interrupted => "interrupted",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one node answered during an operation; part of a [`ErrorKind::NoQuorum`] report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// The node granted (or confirmed) the request.
    Ok,
    /// Another owner holds the lock on this node: its value and remaining TTL in ms
    /// (`-1` when it has no expiry or the refusal did not ask, as a `try_lock`'s does not;
    /// `-2` when it vanished in between).
    Taken {
        /// The holder's value (by redmutex convention, `owner-label:random-hex`).
        holder: Vec<u8>,
        /// The holder's remaining time to live in milliseconds, as `PTTL` reports it.
        pttl_ms: i64,
    },
    /// The lock was not there any more (expired or deleted) when we tried to extend or release it.
    Missing,
    /// The node could not be reached or did not answer in time.
    Unreachable(String),
    /// The other nodes' answers decided the operation before this node's answer came, and it
    /// was not waited for (a round ends at its quorum). Its request still runs there: a late
    /// grant is kept as part of the lock, or undone when the attempt failed; a late release
    /// still releases.
    NotWaitedFor,
    /// The node refused our credentials.
    Auth(String),
    /// The node took the write, but fewer replicas than
    /// [`min_replicas`](crate::MutexOptions::min_replicas) acknowledged it in time (`WAIT`);
    /// the write counts as not done on this node (a grant there was undone).
    ReplicasShort {
        /// How many replicas acknowledged the write.
        acked: u32,
        /// How many were required.
        wanted: u32,
    },
    /// The node answered with an error.
    Error(String),
}

impl NodeOutcome {
    fn kind(&self) -> Option<ErrorKind> {
        match self {
            NodeOutcome::Unreachable(_) => Some(ErrorKind::Connection),
            NodeOutcome::Auth(_) => Some(ErrorKind::Auth),
            NodeOutcome::Error(_) => Some(ErrorKind::Server),
            _ => None,
        }
    }
}

/// One node's line in a per-node report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node's address, without credentials (`redis://127.0.0.1:6379`).
    pub node: String,
    /// What the node answered.
    pub outcome: NodeOutcome,
}

impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.node)?;
        match &self.outcome {
            NodeOutcome::Ok => f.write_str("ok"),
            // An extension or release learns only that the value is not ours.
            NodeOutcome::Taken { holder, .. } if holder.is_empty() => {
                f.write_str("held by another owner")
            }
            NodeOutcome::Taken { holder, pttl_ms } if *pttl_ms < 0 => {
                write!(f, "held by {}", String::from_utf8_lossy(holder))
            }
            NodeOutcome::Taken { holder, pttl_ms } => write!(
                f,
                "held by {} for {} ms",
                String::from_utf8_lossy(holder),
                pttl_ms
            ),
            NodeOutcome::Missing => f.write_str("not there"),
            NodeOutcome::Unreachable(e) => write!(f, "unreachable ({e})"),
            NodeOutcome::NotWaitedFor => {
                f.write_str("not waited for (the other nodes' answers decided)")
            }
            NodeOutcome::Auth(e) => write!(f, "authentication failed ({e})"),
            NodeOutcome::ReplicasShort { acked, wanted } => write!(
                f,
                "replicas short (the write reached {acked} of the {wanted} replicas required)"
            ),
            NodeOutcome::Error(e) => write!(f, "error ({e})"),
        }
    }
}

/// The error of every fallible redmutex operation.
///
/// [`Error::kind`] tells what happened; [`Error::nodes`] tells what each node said when several
/// were asked; [`std::error::Error::source`] is the underlying [`redis::RedisError`] when there
/// is one.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct Error {
    kind: ErrorKind,
    message: String,
    nodes: Vec<NodeReport>,
    #[source]
    source: Option<redis::RedisError>,
    /// Every node that failed did so in a way that waiting cannot mend (see
    /// [`Error::is_misconfiguration`]).
    misconfigured: bool,
}

// The constructors are cold: every call site is an error path, laid out away from the code
// that runs when a lock call succeeds.
impl Error {
    #[cold]
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            nodes: Vec::new(),
            source: None,
            misconfigured: false,
        }
    }

    #[cold]
    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn with_nodes(mut self, nodes: Vec<NodeReport>) -> Error {
        self.nodes = nodes;
        self
    }

    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Error {
        self.kind = kind;
        self
    }

    pub(crate) fn with_source(mut self, source: Option<redis::RedisError>) -> Error {
        self.source = source;
        self
    }

    /// Turns a per-node report into the error a caller sees: with one node, that node's own
    /// kind (connection, auth, server); with several, the kind all failing nodes share when they
    /// agree on auth, and `NoQuorum` otherwise.
    #[cold]
    pub(crate) fn from_report(
        what: &str,
        fallback: ErrorKind,
        nodes: Vec<NodeReport>,
        source: Option<NetError>,
    ) -> Error {
        let kinds: Vec<ErrorKind> = nodes.iter().filter_map(|n| n.outcome.kind()).collect();
        let kind = if nodes.len() == 1 {
            kinds.first().copied().unwrap_or(fallback)
        } else if !kinds.is_empty() && kinds.iter().all(|k| *k == ErrorKind::Auth) {
            ErrorKind::Auth
        } else {
            fallback
        };
        Error::new(kind, what)
            .with_nodes(nodes)
            .with_source(source.map(NetError::into_redis))
    }

    /// Says that every node that failed did so in a way that waiting cannot mend.
    pub(crate) fn misconfigured(mut self, misconfigured: bool) -> Error {
        self.misconfigured = misconfigured;
        self
    }

    /// Whether waiting cannot help: every node that failed refused our credentials, or
    /// presented a certificate that does not verify. Such errors are reported at once instead
    /// of being ridden over like an outage.
    pub(crate) fn is_misconfiguration(&self) -> bool {
        self.kind == ErrorKind::Auth || self.misconfigured
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What each node answered, when the operation asked several (empty otherwise).
    pub fn nodes(&self) -> &[NodeReport] {
        &self.nodes
    }

    /// The message without the kind and without the per-node report.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn render(&self) -> String {
        let mut s = format!("{}: {}", self.kind, self.message);
        if !self.nodes.is_empty() {
            let parts: Vec<String> = self.nodes.iter().map(|n| n.to_string()).collect();
            s.push_str(" [");
            s.push_str(&parts.join("; "));
            s.push(']');
        }
        s
    }
}

/// The error of the `try_lock*` family, like [`std::sync::TryLockError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TryLockError {
    /// The lock is held by someone else and the wait ran out.
    #[error("the lock is held by someone else")]
    WouldBlock,
    /// Taking the lock failed for another reason.
    #[error(transparent)]
    Error(#[from] Error),
}

impl TryLockError {
    /// The kind: [`ErrorKind::WouldBlock`] or the inner error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TryLockError::WouldBlock => ErrorKind::WouldBlock,
            TryLockError::Error(e) => e.kind(),
        }
    }

    /// The per-node report of the inner error (empty for `WouldBlock`).
    pub fn nodes(&self) -> &[NodeReport] {
        match self {
            TryLockError::WouldBlock => &[],
            TryLockError::Error(e) => e.nodes(),
        }
    }
}

impl From<TryLockError> for Error {
    fn from(e: TryLockError) -> Error {
        match e {
            TryLockError::WouldBlock => {
                Error::new(ErrorKind::WouldBlock, "the lock is held by someone else")
            }
            TryLockError::Error(e) => e,
        }
    }
}

/// What a node that failed answered, by the failure's kind.
pub(crate) fn outcome_of(e: &NetError) -> NodeOutcome {
    let text = e.to_string();
    match e.failure() {
        Failure::Auth => NodeOutcome::Auth(text),
        Failure::Server | Failure::Unsuitable => NodeOutcome::Error(text),
        Failure::Timeout
        | Failure::Refused
        | Failure::Dropped
        | Failure::TlsUnverified
        | Failure::Io => NodeOutcome::Unreachable(text),
    }
}

/// A convenient alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
