//! The transport: connections and their deadlines, endpoints with their pools, the node kinds
//! (a server, a Sentinel-watched master, a Redis Cluster), the URL forms, and the fan-out of
//! one round of requests to every node under one deadline.
//!
//! It knows nothing about locks: it sends [`Request`]s it knows as RESP bytes and a key slot,
//! and reports failures by kind ([`Failure`]), never as text to be searched.

mod block;
mod classify;
mod cluster;
mod conn;
mod endpoint;
mod fanout;
mod frame;
mod gather;
mod hub;
mod hub_block;
mod leg;
mod listen;
mod node;
mod plain;
mod poll;
mod redirect;
mod sentinel;
mod slots;
mod socket;
#[cfg(test)]
mod testing;
mod tls;
mod tls_session;
mod unblock;
mod url;
mod wait;
mod wake;
mod warm;

pub(crate) use block::{Blocked, Blocking, block_then};
pub(crate) use cluster::Cluster;
pub(crate) use endpoint::{Probe, Setup};
pub(crate) use fanout::{Enough, exchange, exchange_until};
pub(crate) use hub::{Lane, Pass, wait_shared};
pub(crate) use leg::unread_as_timeouts;
pub(crate) use node::Node;
pub(crate) use sentinel::Sentinel;
pub(crate) use slots::{hash_tag, key_slot};
pub(crate) use url::redact;
pub(crate) use wake::scoped as wake_on;
pub(crate) use wake::scoped_later as wake_on_later;
pub(crate) use wake::{is_set as has_wake_fd, sleep, stopped, woken_now};
pub(crate) use warm::warm_up;
