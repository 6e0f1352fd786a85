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
