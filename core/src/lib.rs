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
//! Beyond the mutex, the same leases serve a fleet-wide counting semaphore
//! ([`Client::semaphore`] → [`Permit`]) and a read-write lock ([`Client::rwlock`] →
//! [`ReadGuard`] / [`WriteGuard`]); the write side of a read-write lock is the mutex of the
//! same name.
//!
//! # Guarantees and assumptions
//!
//! A guard is valid until [`MutexGuard::valid_until`]: the TTL minus the time the grant took
//! minus a drift allowance of 1 % + 2 ms, on a clock that keeps running while the machine is
//! suspended (`CLOCK_BOOTTIME` on Linux). With several nodes, a lock
//! (and each renewal) counts only when a majority confirms it within that validity. Like the
//! Redlock text, this assumes bounded clock drift between the nodes and that nodes do not lose
//! acknowledged writes (persistence with fsync, or a restarted node staying out for one TTL).
//! Fence numbers strictly increase across grants under the same assumption; use them.
//!
//! # Architecture
//!
//! Three layers; a file imports only from its own layer or the ones below it. Every file of
//! `src/` is named here (a test holds this list to the tree).
//!
//! | layer | files | what it may use |
//! | --- | --- | --- |
//! | public API | `lib.rs`; `client.rs` (`Client`, `ClientBuilder`), `sentinel_master.rs` (`SentinelMaster`), `mutex.rs` (`Mutex`), `guard.rs` (`Guard` over the `kind` of lease, one type for every guard, with `MutexGuard`), `semaphore.rs` (`Semaphore`, `Permit`), `rwlock.rs` (`RwLock`, `ReadGuard`, `WriteGuard`), `setters.rs` (the option setters every handle shares, as a macro), `wake.rs` (`wake_on`, `wake_on_checked`, `wake_on_checked_after`: a descriptor that ends waits at once), `operate.rs` (`Client::list`, `Client::force_unlock`: what an operator asks) | the lock protocol, the transport (to open nodes), the vocabulary |
//! | vocabulary | `error.rs` (`Error`, `ErrorKind`, the per-node report), `options.rs` (`MutexOptions` and the bounds), `stats.rs` (`ClientStats`: what a client's locks did, as a snapshot); the wire between the protocol and the transport: `wire/mod.rs` (declarations), `wire/request.rs` (what is sent: RESP bytes and a key slot), `wire/answer.rs` (what comes back: replies, or a failure by kind) | each other |
//! | lock protocol, I/O-free (`lock/proto/`) | `lock/proto/mod.rs` (declarations); `lock/proto/spec.rs` (one lock as its calls see it), `lock/proto/round.rs` with `lock/proto/round/tests.rs` (one acquisition round with its verdict on the validity), `lock/proto/vote.rs` (what one answer says), `lock/proto/fence.rs` (the fence write-back), `lock/proto/plain.rs` (an unfenced `try_lock` as plain commands), `lock/proto/undo.rs` (a refused round's undo), `lock/proto/call.rs` (one acquisition call as one machine: its rounds, its waiter id, each verdict and what comes next), `lock/proto/acquisition.rs` (the call's policy across rounds), `lock/proto/hold.rs` (the lease's state), `lock/proto/release.rs` (the release round), `lock/proto/cleanup.rs` (a clean-up's tries: when a node is done, the pause between tries), `lock/proto/testing.rs` (what their unit tests share). They read no clock, draw no random number and touch no socket | the calls, the tally, the vocabulary (the wire: requests and answers), never the transport |
//! | lock protocol (`lock/`) | `lock/mod.rs` (declarations); `lock/scripts.rs` (the Lua scripts and their invocations, with the `NOSCRIPT` reload), `lock/scripts/fence.rs` (the fence counter's Lua), `lock/scripts/shared.rs` (a semaphore's and a read lock's scripts), `lock/calls.rs` (which call each kind of lock sends), `lock/reply.rs`, `lock/keys.rs`, `lock/token.rs`, `lock/tally.rs` (votes and the quorum rule), `lock/clock.rs` (the lease clock), `lock/voters.rs` (a client's nodes), `lock/counters.rs` (the client's figures as they are counted), `lock/policy.rs` (the eviction check); the blocking drivers of the machines: `lock/acquire.rs`, `lock/wait.rs` (waiting for a release), `lock/room.rs` (the client's threads waiting for one lock take turns: one waits on Redis), `lock/lease.rs` (the lease with its clock, callbacks and waits), `lock/release.rs` (release and extension), `lock/renew.rs` with `lock/renew/tests.rs` (the renew thread), `lock/cleanup.rs` (token-checked releases sent again in the background); `lock/status.rs` (who holds a lock of each kind), `lock/listing.rs` (every lock whose name matches a pattern; breaking a stuck one) with `lock/glob.rs` (Redis's glob patterns) | the transport's fan-out and blocking call, the vocabulary |
//! | transport (`net/`) | `net/mod.rs` (declarations); `net/frame.rs` (where a reply ends; the common replies read without redis-rs's parser), `net/socket.rs`, `net/plain.rs` with `net/plain/tests.rs`, `net/tls_session.rs` and `net/tls.rs` (a connection's socket, plain or TLS), `net/conn.rs` (deadlines, pipelines), `net/poll.rs`, `net/endpoint.rs` (a pool per server), `net/node.rs`, `net/sentinel.rs`, `net/cluster.rs` with `net/cluster/tests.rs`, `net/slots.rs` and `net/redirect.rs` (routing), `net/url.rs`, `net/fanout.rs`, `net/leg.rs`, `net/wait.rs` and `net/gather.rs` (one round to every node under one deadline, ending early once its answers decide it), `net/warm.rs` (a fresh client's first connections), `net/block.rs` (a blocking pop with requests behind it), `net/unblock.rs` (ending another connection's block early), `net/hub.rs` (one waiting connection per server, shared by a client's waits) with `net/hub_block.rs` (its `BLPOP`, ended early when the lists change) and `net/listen.rs` (a Cluster master's: it listens on sharded pub/sub), `net/wake.rs` (the calling thread's wake-up descriptor), `net/classify.rs` (which failure a redis-rs error is), `net/testing.rs` (real servers for its own tests) | nothing above it: it knows no lock, token or fence |
//! | the simulator's view (`sim_support/`, with the `sim-support` feature only) | `sim_support/mod.rs`: re-exports of the machines' own types and the calls they make, for the simulator, the test suites and the benchmark, which translate them into their own types themselves | the lock protocol, the vocabulary |
//!
//! `sync.rs` (the process-local locks) and `process.rs` (state that a forked child gets its
//! own copy of) serve every layer and import nothing of the crate.
//!
//! ## Adding a lock kind
//!
//! A new kind of lease (say, a barrier) touches these files of the core:
//!
//! 1. `lock/proto/spec.rs`: a `Kind` variant, what the protocol tells apart;
//! 2. `lock/scripts/`: its Lua scripts, in a file beside `shared.rs`, named in `scripts.rs`;
//! 3. `lock/calls.rs`: which script it sends to acquire, extend, release and undo, and its
//!    refusal; `preload` and `named` list the new scripts;
//! 4. `lock/status.rs`: what its status query reads, and `lock/listing.rs`: its holds in a
//!    listing and their release by `force_unlock` (a `HoldKind`), and its keys in `keys.rs`'s
//!    companions, so that a scan finds it;
//! 5. `guard.rs`: its marker in [`kind`] (one line): its guard is a [`Guard`] of that kind;
//! 6. a file for its handle (`semaphore.rs` is the model: the handle, its calls, the guard's
//!    alias), declared and exported in `lib.rs`.
//!
//! The rounds, the lease, renewal, release, loss and the waiting are the same machines for
//! every kind. Outside the core: one arm in the C binding's `take.rs` and its functions
//! (`ffi-c/src/lock.rs` or `shared.rs`), the C++ wrapper (`include/redmutex.hpp`), one
//! `Source` in the Python binding (`py/src/source.rs`) and its class (and its class in
//! `redmutex.asyncio`), and the simulator's
//! lock shape (`sim/`).
//!
//! Dependencies, each for its own job: `redis` for connections, RESP and URL parsing (only its
//! `script` feature; TLS through `tls-rustls`), `rustls` with the `ring` provider for TLS (no
//! C toolchain beyond what `ring` needs), `getrandom` for tokens and jitter from the OS
//! CSPRNG, `rustix` for `CLOCK_BOOTTIME` through a safe call (Linux), `thiserror` for the error type, `log` for what a `Drop` cannot return, `metrics` (only with the feature of that name) for the client's figures in a metrics exporter, and
//! `percent-encoding` for the escapes in URL user-info. The library's own locks and condition
//! variables are std's, not parking_lot's: parking_lot keeps one process-wide table of parked
//! threads, which a forked child inherits with entries of threads it does not have, and its
//! next contended lock can hang or crash there (see `sync.rs` and RELIABILITY.md).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod error;
mod guard;
mod lock;
mod mutex;
mod net;
mod operate;
mod options;
mod process;
mod rwlock;
mod semaphore;
mod sentinel_master;
mod setters;
mod stats;
mod sync;
mod wake;
mod wire;

pub use client::{Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, MAX_NODES, MAX_OWNER_LEN};
pub use error::{Error, ErrorKind, NodeOutcome, NodeReport, Result, TryLockError};
pub use guard::{Guard, MutexGuard, kind};
pub use lock::{
    HoldKind, ListedHold, ListedLock, LockStatus, Released, RwLockStatus, SemaphoreStatus,
};
pub use mutex::Mutex;
pub use operate::MAX_PATTERN_LEN;
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use semaphore::{Permit, Semaphore};
pub use sentinel_master::SentinelMaster;
pub use stats::{ByKind, ClientStats, HISTOGRAM_BOUNDS, Histogram, LossReason, LostBy, Outcomes};
pub use wake::{WakeSource, wake_on, wake_on_checked, wake_on_checked_after};
#[cfg(feature = "sim-support")]
#[doc(hidden)]
pub mod sim_support;

pub use options::{
    DEFAULT_TTL, FIRST_WAIT, MAX_NAME_LEN, MAX_PERMITS, MAX_TTL, MIN_TTL, MutexOptions,
    default_node_timeout, drift,
};
