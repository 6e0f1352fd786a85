//! A deterministic simulator of redmutex's lock protocol.
//!
//! - [`redis`]: a simulated Redis 7.0 that runs the project's real Lua scripts, unchanged,
//!   in embedded Lua 5.1; kept honest by a differential test against a real `redis-server`.
//! - [`world`]: simulated time, networks, clocks and faults, all decided by one seed.
//! - [`client`]: the narrow interface a lock client plugs in through, and a model client that
//!   follows the design's protocol with the real scripts.
//! - [`checker`]: the properties checked after every step.
//! - [`translate`]: the one place where the simulator's types (requests as words, replies as
//!   values, µs) meet those of the core's protocol machines, which the core client drives.
//!
//! # Decisions
//!
//! - **Time** is true time in µs on one event queue. Each server has its own clock (an
//!   offset and a rate within ±0.2%) in ms, set before every command and fixed while a
//!   command or script runs. Each client has a boot clock and a monotonic clock with the
//!   same rate; a suspend stops only the monotonic one.
//! - **A frozen server** (SIGSTOP) runs nothing, but its clock is the machine's and keeps
//!   going: what arrived meanwhile runs when it continues, and keys whose time passed are
//!   expired by then. A restart loses connections and the script cache; without
//!   persistence the keyspace too, and then the node stays down longer than one TTL plus the
//!   longest network delay, as the design requires of such nodes.
//! - **The network** delivers each connection's messages in order. While faults are on it
//!   also loses messages, delivers some long after their sender gave up, and cuts
//!   connections right after a request was written (the request still runs). Once healed,
//!   delays stay under 12 ms.
//! - **What the clients share** ([`world::Shape`]): a mutex, a read-write lock (each call a
//!   read hold or the write side) or a semaphore of 2 permits (one node, as the library
//!   allows); the checker knows each shape's holders and fences.
//! - **A client's commands run in order on its connection**: what it wrote behind a waiting
//!   BLPOP runs when the BLPOP is answered, and never if the connection closes first.
//! - **Determinism**: every choice comes from generators forked from the seed, and every
//!   collection that is iterated is ordered; `SIM_SEED=<seed>` replays a run step for step.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checker;
pub mod client;
pub mod redis;
pub mod rng;
pub mod translate;
pub mod world;
