//! The hub's `BLPOP` (see `hub.rs`): one over the lists of all of a client's waits on a
//! server, sent again every few seconds, and ended early (`CLIENT UNBLOCK`) when the lists
//! waited on change.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::conn::Connection;
use super::endpoint::Endpoint;
use super::poll::{self, Either};
use super::unblock::unblock;

/// How long the hub's `BLPOP` blocks before it is sent again (a command per this period,
/// for all of a client's waits on a server).
const BLOCK: Duration = Duration::from_secs(5);
/// How much later than its timeout the hub's `BLPOP` may answer before its connection is
/// taken for broken (Redis ends timed-out blocks on its cron tick, every 100 ms at hz 10).
const GRACE: Duration = Duration::from_secs(2);
/// How often an unblock that found the hub's `BLPOP` not blocked yet is tried again, and
/// how many times.
const UNBLOCK_RETRY: Duration = Duration::from_millis(2);
const UNBLOCK_TRIES: u32 = 8;

/// Sends the `BLPOP` over `keys` on `c` and reads its reply; ends it early (and reads that
/// reply) when the bell rings and the keys are stale. `None` when the connection broke or
/// did not answer in time, or the client is gone. `stale` says whether the keys are.
pub(super) fn block(
    (stale, endpoint): (&dyn Fn() -> bool, &Arc<Endpoint>),
    c: &mut Connection,
    keys: &[Vec<u8>],
    bell: &mut UnixStream,
) -> Option<Value> {
    let mut blpop = redis::cmd("BLPOP");
    for k in keys {
        blpop.arg(k.as_slice());
    }
    blpop.arg(BLOCK.as_secs());
    c.set_write_timeout(Some(endpoint.connect_timeout())).ok()?;
    c.send_packed_command(&blpop.get_packed_command()).ok()?;
    let until = Instant::now() + BLOCK + GRACE;
    // An unblock sent, that found the `BLPOP` not yet blocked: tries left.
    let mut retry: Option<u32> = None;
    while !c.holds(1) {
        let now = Instant::now();
        let wait = match retry {
            Some(_) => UNBLOCK_RETRY,
            None => until.saturating_duration_since(now),
        };
        match poll::socket_or(c.socket()?, &*bell, wait) {
            Either::Socket => break,
            Either::TimedOut if retry.is_none() => return None,
            Either::TimedOut | Either::Woken => {
                drain(bell);
                if endpoint.is_closed() {
                    return None;
                }
                let tries = match retry.take() {
                    Some(t) => t,
                    None if stale() => UNBLOCK_TRIES,
                    None => continue,
                };
                let (Some(id), Some(peer)) = (c.id, c.peer()) else {
                    continue;
                };
                let deadline = Instant::now() + endpoint.connect_timeout();
                // 0: not blocked; the server has yet to read the `BLPOP` (or its reply is on
                // its way): try again shortly.
                if unblock(endpoint, id, &peer, deadline) == Some(0) && tries > 1 {
                    retry = Some(tries - 1);
                }
            }
        }
    }
    c.set_read_timeout(Some(GRACE)).ok()?;
    c.recv_response().ok()
}

/// Reads whatever rang the bell.
pub(super) fn drain(bell: &mut UnixStream) {
    let mut buf = [0u8; 64];
    while matches!(bell.read(&mut buf), Ok(n) if n > 0) {}
}
