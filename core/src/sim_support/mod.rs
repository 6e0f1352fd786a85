//! Internals that the project's own simulator (`redmutex-sim`) drives; not part of the API.
//!
//! The simulator runs the lock protocol's own I/O-free machines (`lock/proto`) in a
//! simulated world. This module only translates between their types and the simulator's:
//! requests as argument vectors, replies as `redis::Value`s, the lease clock as
//! microseconds. Every decision stays in the machines.

mod acquisition;
mod cleanup;
mod lease;
mod lock;
mod wire;

pub use acquisition::{Acquisition, Grant, Next, Refused, Step, Verdict, jitter};
pub use cleanup::CleanupTries;
pub use lease::{Due, Hold, Release, Renewal};
pub use lock::Lock;
pub use wire::{Argv, Reply, resend, scripts};

pub use crate::lock::clock::Stamp;
pub use crate::lock::proto::acquisition::{Then, jitter as jittered};
pub use crate::lock::proto::call::{AcquireCall, Verdict as CallVerdict, Withdraw};
pub use crate::lock::proto::cleanup::Tries;
pub use crate::lock::proto::hold::{Due as HoldDue, Extended, Hold as HoldState, Why};
pub use crate::lock::proto::release::{ReleaseRound, released};
pub use crate::lock::proto::round::{AcquireRound, Grant as RoundGrant, Next as RoundNext, Refused as RoundRefused, Requests};
pub use crate::lock::proto::undo::Undo;
pub use crate::lock::proto::{Controls, Kind, Spec};
pub use crate::lock::scripts::Call;
pub use crate::lock::tally::{Seat, Tally};
pub use crate::lock::{Keys, extend_call, release_call, wake_wait, withdraw_calls};
pub use crate::wire::{Answer, Command, Failure, NetError, Request};
