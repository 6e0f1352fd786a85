//! A blocking distributed mutex on Redis, for programs that block instead of awaiting.
//!
//! Think of the one key to a shared washroom: whoever holds the key may go in, everyone else
//! waits, and a key that was not returned in time is taken back. redmutex is that key for a
//! fleet of servers: a lock on one Redis (alone, behind Sentinel, or a Redis Cluster), or on
//! several independent ones (Redlock), with an RAII guard, renewal on one background thread,
//! fencing numbers, and waiters that learn of a release within about one round trip instead
//! of polling.
//!
//! ```no_run
//! use redmutex::{Client, TryLockError};
//! use std::time::Duration;
//!
//! let client = Client::open("redis://127.0.0.1:6379")?;
//! let mutex = client.mutex("invoice:nightly:lock").ttl(Duration::from_secs(30));
//! match mutex.try_lock() {
//!     Ok(guard) => {
//!         // Pass the fence to the database so that a stale holder's writes are refused.
//!         println!("sending invoices, fence {}", guard.fence());
//!         guard.check()?; // still ours? (local, no network)
//!         guard.unlock()?;
//!     }
//!     Err(TryLockError::WouldBlock) => println!("another server sends them tonight"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok::<(), redmutex::Error>(())
//! ```
//!
//! # On the wire
//!
//! The lock is a plain string key holding the owner's token (`hostname:pid:` followed by 16
//! random bytes in hex), set with `SET NX PX` semantics, so any client that locks the same key
//! that way interoperates. Companion keys (`{name}:fence`, `{name}:wake`, …) share the name's
//! Redis Cluster slot.
//!
//! # Guarantees and assumptions
//!
//! A guard is valid until [`MutexGuard::valid_until`]: the TTL minus the time the grant took
//! minus a drift allowance of 1 % + 2 ms, on the monotonic clock. With several nodes, a lock
//! (and each renewal) counts only when a majority confirms it within that validity. Like the
//! Redlock text, this assumes bounded clock drift between the nodes and that nodes do not lose
//! acknowledged writes (persistence with fsync, or a restarted node staying out for one TTL).
//! Fence numbers strictly increase across grants under the same assumption; use them.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod acquire;
mod client;
mod cluster;
mod error;
mod guard;
mod keys;
mod mutex;
mod node;
mod options;
mod process;
mod quorum;
mod renew;
mod scripts;
mod sentinel;
mod sync;
mod token;
mod url;

pub use client::{
    Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, MAX_NODES, MAX_OWNER_LEN, SentinelMaster,
};
pub use error::{Error, ErrorKind, NodeOutcome, NodeReport, Result, TryLockError};
pub use guard::{MutexGuard, Released};
pub use mutex::{LockStatus, Mutex};
/// Internals that the project's own simulator (`redmutex-sim`) drives; not part of the API.
#[doc(hidden)]
pub mod sim_support {
    /// Each Lua script the lock sends, by name (`acquire`, `release`, …), with its exact
    /// source text.
    pub fn scripts() -> Vec<(&'static str, &'static str)> {
        crate::scripts::named()
    }
}

pub use options::{
    DEFAULT_TTL, MAX_NAME_LEN, MAX_TTL, MIN_TTL, MutexOptions, default_node_timeout, drift,
};
