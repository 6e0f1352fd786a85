//! A round's replies read as they come: the sockets of its own connections (TCP, TLS or Unix)
//! waited on all at once (`poll(2)`), so that a round that ends at its quorum ends with the
//! first replies, not with the first nodes in a list. redis-rs's connections (TLS without a
//! configuration of our own) cannot be waited on this way; the fan-out reads them one after
//! another.

use std::time::{Duration, Instant};

use super::conn::{Connection, remaining};
use super::poll::readable;
use super::wake;

/// Hands each leg of `waiting` to `read` as soon as its `expected(leg)` replies (behind those
/// its connection still owes) have all come, or its connection failed; `read` says whether
/// that decided the round. Returns the legs not read: when the round was decided, when the
/// deadline passed, when this thread's waits stopped (see `wake.rs`: then each of those
/// reads ends at once, as at its deadline), or when the sockets could not be waited on (the
/// caller then reads them one after another, as it does redis-rs's).
pub(super) fn as_they_come(
    mut waiting: Vec<(usize, Connection)>,
    expected: impl Fn(usize) -> usize,
    deadline: Instant,
    read: &mut dyn FnMut(usize, Connection, Instant) -> bool,
) -> Vec<(usize, Connection)> {
    let began = Instant::now();
    let mut ready = Vec::with_capacity(waiting.len());
    loop {
        while let Some(k) = waiting.iter().position(|(l, c)| c.holds(expected(*l))) {
            let (l, conn) = waiting.swap_remove(k);
            if read(l, conn, began) {
                return waiting;
            }
        }
        let Ok(left) = remaining(deadline) else {
            return waiting;
        };
        if wake::reads_stop() {
            return waiting;
        }
        ready.clear();
        if waiting.is_empty() || !wait(&waiting, left, &mut ready) {
            return waiting;
        }
        // Highest first: `swap_remove` then moves only legs already looked at.
        for &k in ready.iter().rev() {
            if !waiting[k].1.fill() {
                // The connection failed: its read says how.
                let (l, conn) = waiting.swap_remove(k);
                if read(l, conn, began) {
                    return waiting;
                }
            }
        }
    }
}

/// Waits up to `left` for any of the legs' sockets to become readable, or this thread's
/// wake-up descriptor when it watches every wait (see [`readable`]); `false` when one of
/// them cannot be waited on.
fn wait(legs: &[(usize, Connection)], left: Duration, ready: &mut Vec<usize>) -> bool {
    use std::os::fd::AsFd;
    let Some(sockets) = legs
        .iter()
        .map(|(_, conn)| conn.socket().map(AsFd::as_fd))
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let wake = wake::watched_fd();
    // Stopped by the check that arming the setting just ran (see `wake.rs`): the loop looks
    // again, and ends.
    if wake::stopped() {
        return true;
    }
    // Unarmed (see `wake.rs`): the sockets alone until the setting falls due, and then the
    // loop looks again, and arms it.
    match wake::due().map(|due| due.saturating_duration_since(Instant::now())) {
        Some(due) if due < left => {
            readable(&sockets, None, due, ready);
            true
        }
        _ => readable(&sockets, wake.as_ref().map(AsFd::as_fd), left, ready),
    }
}
