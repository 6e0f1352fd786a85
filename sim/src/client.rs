//! The narrow interface between the world and a lock client, in the style of an I/O-free
//! protocol core: the client never reads a clock, draws a random number or touches a socket;
//! the world hands it inputs with the time and randomness, and carries out its outputs.
//!
//! Two clients implement it: [`core`], whose every decision is made by the core's own
//! I/O-free protocol machines, and [`model`], a stand-in that follows the design with the
//! real scripts and can be told to make each of the negative controls' mistakes.

pub mod core;
pub mod model;

use std::fmt;

use crate::redis::Reply;
use crate::rng::Rng;

/// Identifies one request a client sent, unique per client.
pub type RequestId = u64;

/// What the client's clocks read when an input is handed to it (µs).
#[derive(Clone, Copy, Debug)]
pub struct Now {
    /// The monotonic clock (`CLOCK_MONOTONIC`): stops while the machine is suspended.
    pub mono: u64,
    /// The boot clock (`CLOCK_BOOTTIME`): keeps counting through a suspend.
    pub boot: u64,
}

/// An event for the client.
#[derive(Clone, Debug)]
pub enum Input {
    /// The simulation starts.
    Start,
    /// Node `node` answered request `id`.
    Reply {
        /// The node.
        node: usize,
        /// The request.
        id: RequestId,
        /// Its reply.
        reply: Reply,
    },
    /// Request `id` to node `node` failed: connection refused, reset or closed. A request
    /// that silently vanished gives no input at all; the client's own timer must notice.
    Failed {
        /// The node.
        node: usize,
        /// The request.
        id: RequestId,
    },
    /// Request `id` to node `node` could not be written: it was to follow request `after`
    /// on the same connection (see [`Output::Send`]), and that connection has closed since.
    /// Nothing of it reached the node.
    Unwritten {
        /// The node.
        node: usize,
        /// The request.
        id: RequestId,
    },
    /// A timer the client set with [`Output::WakeAt`] fired.
    Wake {
        /// The token given with [`Output::WakeAt`].
        token: u64,
    },
}

/// What the client asks the world to do, or tells the checker.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Send one command (a script call: `EVALSHA`/`EVAL`, or a plain one) to node `node`.
    Send {
        /// The node.
        node: usize,
        /// The request's id, unique per client, echoed in [`Input::Reply`].
        id: RequestId,
        /// The command and its arguments.
        argv: Vec<Vec<u8>>,
        /// The earlier request it must follow on the same connection (an undo behind the
        /// first of a round's requests whose answers were left unread): when that connection
        /// has closed since, the write fails ([`Input::Unwritten`]) rather than going out on a
        /// new one.
        after: Option<RequestId>,
    },
    /// Close my connection to `node` (requests written on it still run there; their replies
    /// are lost); the next send opens a new one.
    Reconnect {
        /// The node.
        node: usize,
    },
    /// End my `BLPOP` on `node` early, as if it had timed out (`CLIENT UNBLOCK`), from
    /// another connection: the requests behind it on my connection then run, and their
    /// replies come after the `BLPOP`'s. Its own reply goes nowhere; the message may be lost
    /// or late like any other.
    Unblock {
        /// The node.
        node: usize,
    },
    /// Hand me [`Input::Wake`] with `token` once my monotonic clock reads `mono` (µs).
    WakeAt {
        /// The monotonic clock's reading (µs).
        mono: u64,
        /// Echoed in [`Input::Wake`].
        token: u64,
    },
    /// A claim for the checker.
    Note(Note),
}

/// What a client claims about the lock, as its user would learn it. The checker judges these
/// claims against the servers and against each other on true time.
// Each variant's doc names its fields.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq)]
pub enum Note {
    /// The user asked for the lock (`shared`: a read hold or a permit) and is now waiting
    /// for it.
    Wants { shared: bool },
    /// The call gave up without the lock (a `try_lock` refused): the user no longer waits.
    GaveUp,
    /// An attempt with this token began; its requests may store the token on servers.
    Attempt { token: Vec<u8> },
    /// The attempt with this token ended without the lock (after its undo was sent).
    AttemptOver { token: Vec<u8> },
    /// The lock is held with `token` and `fence` until the boot clock reads `valid_until`;
    /// `shared`: a semaphore's permit or a read hold, not the mutex (a write).
    Acquired {
        token: Vec<u8>,
        fence: u64,
        valid_until: u64,
        shared: bool,
    },
    /// The hold was renewed: valid until the boot clock reads `valid_until`.
    Extended { valid_until: u64 },
    /// The holder acts on the protected resource with its fence.
    Use { fence: u64 },
    /// The holder stops holding and starts releasing (it no longer acts).
    Releasing,
    /// The holder learned that it lost the lock (renewal failed within its validity).
    Lost,
    /// The release that followed `Releasing` is over: `clean` when it was reported to the
    /// user as a release (a quorum confirmed it), rather than as a loss or an error;
    /// `retried` when it asked some node again after a try that may have run there.
    Released { clean: bool, retried: bool },
}

/// An input as a trace line.
impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Start => f.write_str("start"),
            Input::Reply { node, id, reply } => write!(f, "reply n{node}#{id} {reply}"),
            Input::Failed { node, id } => write!(f, "failed n{node}#{id}"),
            Input::Unwritten { node, id } => write!(f, "unwritten n{node}#{id}"),
            Input::Wake { token } => write!(f, "wake {token}"),
        }
    }
}

/// A claim as a trace line, tokens as text.
impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |t: &[u8]| String::from_utf8_lossy(t).into_owned();
        match self {
            Note::Wants { shared: false } => f.write_str("wants"),
            Note::Wants { shared: true } => f.write_str("wants (shared)"),
            Note::GaveUp => f.write_str("gave up"),
            Note::Attempt { token } => write!(f, "attempt {}", text(token)),
            Note::AttemptOver { token } => write!(f, "attempt over {}", text(token)),
            Note::Acquired {
                token,
                fence,
                valid_until,
                shared,
            } => {
                let how = if *shared { " (shared)" } else { "" };
                write!(
                    f,
                    "acquired {}{how} fence {fence} until boot {valid_until}",
                    text(token)
                )
            }
            Note::Extended { valid_until } => write!(f, "extended until boot {valid_until}"),
            Note::Use { fence } => write!(f, "use fence {fence}"),
            Note::Releasing => f.write_str("releasing"),
            Note::Lost => f.write_str("lost"),
            Note::Released { clean, retried } => {
                let what = if *clean { "released" } else { "release failed" };
                let again = if *retried { " (asked again)" } else { "" };
                write!(f, "{what}{again}")
            }
        }
    }
}

/// A lock client driven by the world.
pub trait Client {
    /// Handles one input at time `now`, drawing any randomness from `rng`, and appends what
    /// it wants done to `out`.
    fn handle(&mut self, input: Input, now: Now, rng: &mut Rng, out: &mut Vec<Output>);
}
