//! Internals that the project's own simulator (`redmutex-sim`) drives; not part of the API.
//!
//! The simulator, and the test suites and the benchmark that send the library's own
//! requests, run the lock protocol's I/O-free machines (`lock/proto`) themselves. This module
//! only names the machines' own types and the calls they make; translating them into a
//! driver's types is the driver's business, and every decision stays in the machines.

pub use crate::lock::clock::Stamp;
pub use crate::lock::proto::acquisition::{Then, jitter};
pub use crate::lock::proto::call::{AcquireCall, Verdict, Withdraw};
pub use crate::lock::proto::cleanup::Tries;
pub use crate::lock::proto::hold::{AlreadyReleased, Due, Extended, Hold, Why};
pub use crate::lock::proto::release::{ReleaseRound, released};
pub use crate::lock::proto::round::{AcquireRound, Grant, Next, Refused, Requests};
pub use crate::lock::proto::undo::Undo;
pub use crate::lock::proto::{Controls, Kind, Spec};
pub use crate::lock::scripts::{Call, Script};
pub use crate::lock::tally::{Seat, Tally};
pub use crate::lock::{
    Keys, extend_call, release_call, script_sources as scripts, wake_wait, withdraw_calls,
};
pub use crate::wire::{Answer, Command, Failure, NetError, Request};
