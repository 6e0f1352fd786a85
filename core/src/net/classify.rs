//! Which kind of failure a redis-rs error is: the transport tells it once, where the error
//! happens, and everything above decides by the kind.

use redis::RedisError;

use crate::wire::{Failure, NetError};

impl From<RedisError> for NetError {
    fn from(e: RedisError) -> NetError {
        let failure = if e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
        {
            Failure::Auth
        } else if super::tls::is_unverified(&e) {
            Failure::TlsUnverified
        } else if e.is_timeout() {
            Failure::Timeout
        } else if e.is_connection_refusal() {
            Failure::Refused
        } else if e.is_io_error() && e.is_connection_dropped() {
            Failure::Dropped
        } else if e.is_io_error() || e.is_connection_dropped() {
            Failure::Io
        } else {
            Failure::Server
        };
        NetError::of_redis(failure, e)
    }
}

/// Whether an error reply says the server is a replica (`READONLY`): a master demoted by a
/// failover. Redis 7 passes the error a script's `redis.call` raised through with its code;
/// Redis 6 wraps it in an `ERR` that quotes it (`ERR Error running script (call to f_…):
/// @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.`).
pub(crate) fn is_read_only(e: &RedisError) -> bool {
    match e.code() {
        Some("READONLY") => true,
        Some("ERR") => e
            .detail()
            .is_some_and(|d| d.starts_with("Error running script") && d.contains(": -READONLY ")),
        _ => false,
    }
}
