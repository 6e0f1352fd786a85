//! A deterministic simulator of redmutex's lock protocol.
//!
//! - [`redis`]: a simulated Redis 7.0 that runs the project's real Lua scripts, unchanged,
//!   in embedded Lua 5.1; kept honest by a differential test against a real `redis-server`.
//! - [`world`]: simulated time, networks, clocks and faults, all decided by one seed.
//! - [`client`]: the narrow interface a lock client plugs in through, and a model client that
//!   follows the design's protocol with the real scripts.
//! - [`checker`]: the properties checked after every step.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checker;
pub mod client;
pub mod redis;
pub mod rng;
pub mod world;
