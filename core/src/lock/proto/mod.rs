//! The lock protocol without I/O: state machines that take events in (a node's answer, the
//! lease clock's reading, the time since a call began, a random number) and hand out what to
//! send, to whom, and when to look again. Nothing here reads a clock, draws a random number
//! or touches a socket: the blocking drivers (`acquire.rs`, `wait.rs`, `release.rs`,
//! `renew.rs`) run these machines over the transport, and the project's simulator runs the
//! very same machines in a simulated world (see `sim_support` in the crate root).
//!
//! - [`round`]: one acquisition round, counted answer by answer, with the verdict on the
//!   validity; [`fence`]: its fence write-back, when the granting nodes' counters differ;
//!   [`vote`]: what one node's answer says; [`plain`]: the
//!   acquire of an unfenced lock's caller that will not wait, as plain commands instead of
//!   the script.
//! - [`call`]: one call that takes the lock, as one machine: its rounds, the id it announces
//!   itself by, each verdict with where to undo and where to withdraw, and what comes next;
//!   [`acquisition`]: its policy across rounds: after each refused round, whether to return,
//!   wait for a release (and where, and how long), pause, or try again.
//! - [`hold`]: the lease's state: when to renew, what a renewal's answers mean, why it was
//!   lost.
//! - [`release`]: the release round: what counts as released, and whom to ask again.
//! - [`cleanup`]: a clean-up's tries on fresh connections: when a node is done, the pause
//!   before the next try.

pub(crate) mod acquisition;
pub(crate) mod call;
pub(crate) mod cleanup;
pub(crate) mod fence;
pub(crate) mod hold;
pub(crate) mod plain;
pub(crate) mod release;
pub(crate) mod round;
mod spec;
#[cfg(test)]
mod testing;
pub(crate) mod undo;
pub(crate) mod vote;

pub use spec::{Controls, Kind, Spec};
