//! Waiting for a release: a blocking pop on the wake-up list that a release pushes one
//! element onto, so a waiter learns of a release within about one round trip.

use std::time::{Duration, Instant};

use super::acquire::{Attempt, Plan};
use super::cleanup::Cleanup;
use super::scripts::Call;
use super::token;
use crate::error::Error;
use crate::net::{self, Blocked, Blocking, Command, key_slot};

impl Plan {
    /// Blocks until a release signal, or `block` passes. Falls back to a randomized sleep
    /// when no node can be waited on.
    ///
    /// With one node, the next attempt's requests are pipelined behind the `BLPOP`: Redis
    /// runs them the moment the wait ends, so a waiter learns of a release and takes the lock
    /// in one round trip. Their result is returned.
    pub(super) fn wait_for_release(
        &self,
        wake_from: &[usize],
        block: Duration,
        will_wait: bool,
    ) -> Result<Option<Attempt>, Error> {
        if block.is_zero() {
            return Ok(None);
        }
        let nodes = &self.voters.nodes;
        let i = if wake_from.is_empty() {
            token::pick(nodes.len())
        } else {
            wake_from[token::pick(wake_from.len())]
        };
        let round = match nodes.len() {
            1 => Some(self.round(true, will_wait)?),
            _ => None,
        };
        let started = Instant::now();
        // Redis checks blocking timeouts on its cron tick (every 100 ms at the default hz
        // 10), so a BLPOP may return up to a tick late. The wait must end on time (a crashed
        // holder's key expires exactly then), so our own read deadline ends it, and a
        // connection whose BLPOP is still pending is dropped, never reused. Long waits ask
        // the server for a tick less, so that they usually end cleanly.
        let tick = Duration::from_millis(100);
        let server_block = if block > tick + tick / 2 {
            block - tick
        } else {
            block
        };
        // BLPOP takes seconds with millisecond precision; 0 would mean "forever".
        let secs = format!("{:.3}", server_block.as_secs_f64().max(0.001));
        let mut blpop = redis::cmd("BLPOP");
        blpop.arg(self.keys.wake.as_slice()).arg(secs);
        let slot = key_slot(&self.keys.wake);
        let then: Vec<&Call> = round.iter().flat_map(|r| &r.calls).collect();
        let blocking = Blocking {
            node: &nodes[i],
            slot,
            command: &Command::keyed(blpop, slot),
            connect_by: started + self.node_timeout,
            until: started + block + Duration::from_millis(2),
        };
        // The attempt behind the block runs when it ends: its validity is counted from
        // before it was sent, on the lease clock.
        let t0 = self.voters.clock.now();
        let blocked = net::block_then(
            blocking,
            &then,
            self.node_timeout + self.opts.replica_wait(),
            round.as_ref().map(|r| &r.undo),
        );
        match (blocked, &round) {
            (Blocked::Ended(Some(answer)), Some(round)) => {
                return self.settle(round, t0, vec![answer]).map(Some);
            }
            (Blocked::Ended(_) | Blocked::TimedOut, _) => return Ok(None),
            // The attempt behind the block may have run, and its undo could not follow it.
            (Blocked::Failed, Some(round)) => {
                let until = started + self.grant_ttl();
                let cleanup = Cleanup::new(
                    &self.keys,
                    round.token(),
                    &self.opts,
                    self.node_timeout,
                    vec![i],
                    until,
                );
                self.voters.renewer.clean_up(cleanup);
            }
            (Blocked::Failed, None) => {}
        }
        let left = block.saturating_sub(started.elapsed());
        std::thread::sleep(token::jitter(self.opts.retry_delay).min(left));
        Ok(None)
    }
}
