//! Waiting for a release: a blocking pop on the wake-up list that a release pushes one
//! element onto, so a waiter learns of a release within about one round trip.

use std::time::{Duration, Instant};

use super::acquire::{Plan, WaitEnd};
use super::calls::withdraw_calls;
use super::cleanup::Cleanup;
use crate::error::Error;
use crate::net::{self, Blocked, Blocking, key_slot};
use crate::wire::Command;

/// Redis checks blocking timeouts on its cron tick (every 100 ms at the default hz 10).
const TICK: Duration = Duration::from_millis(100);

/// The `BLPOP` timeout to ask a server for, for a wait of `block`: a BLPOP may return up to a
/// tick late, so long waits ask for a tick less and usually end cleanly by the server's
/// answer; our own read deadline ends them on time either way.
pub(crate) fn server_block(block: Duration) -> Duration {
    if block > TICK + TICK / 2 {
        block - TICK
    } else {
        block
    }
}

impl Plan {
    /// Blocks on node `i` until a release signal, or `block` passes, with the next round's
    /// requests pipelined `behind` the `BLPOP` when the call says so (see `Then::Wait`):
    /// their result is returned. A wait whose connection broke says how much of it was left.
    #[inline(never)]
    pub(super) fn wait_for_release(
        &self,
        i: usize,
        block: Duration,
        (will_wait, behind): (bool, bool),
        announced: bool,
    ) -> Result<WaitEnd, Error> {
        let nodes = &self.voters.nodes;
        let spec = &self.spec;
        let mut round = match behind {
            // Only a call that cannot be told how the wait ends sends its round behind it.
            true => Some(self.round((true, false), will_wait)?),
            false => None,
        };
        let started = Instant::now();
        // The wait must end on time (a crashed holder's key expires exactly then): a block
        // still pending at our deadline is ended early (see `net::block_then`).
        // BLPOP takes seconds with millisecond precision; 0 would mean "forever".
        let secs = format!("{:.3}", server_block(block).as_secs_f64().max(0.001));
        let mut blpop = redis::cmd("BLPOP");
        blpop.arg(spec.keys.wake.as_slice()).arg(secs);
        let slot = key_slot(&spec.keys.wake);
        let then = round.as_ref().map_or(&[][..], |(_, sent)| &sent.calls[..]);
        let blocking = Blocking {
            node: &nodes[i],
            slot,
            command: &Command::keyed(blpop, slot),
            connect_by: started + spec.node_timeout,
            until: started + block + Duration::from_millis(2),
        };
        let then: Vec<_> = then.iter().collect();
        let blocked = net::block_then(
            blocking,
            &then,
            spec.node_timeout + spec.opts.replica_wait(),
            round
                .as_ref()
                .map(|(_, sent)| &sent.undo as &dyn crate::wire::Request),
        );
        match (blocked, round.take()) {
            (
                Blocked::Ended {
                    behind: Some(answer),
                    ..
                },
                Some((mut round, sent)),
            ) => {
                super::calls::refusal(spec, std::slice::from_ref(&answer))?;
                round.answer(i, &*nodes[i], &answer);
                return Ok(WaitEnd::Attempt(self.settle(round, &sent, &[], announced)));
            }
            (Blocked::Ended { woken, .. }, _) => return Ok(WaitEnd::Ended { woken }),
            (Blocked::TimedOut, _) => return Ok(WaitEnd::Ended { woken: false }),
            // The attempt behind the block may have run, and its undo could not follow it.
            (Blocked::Failed, Some((round, _))) => {
                let until = self.voters.clock.instant_of(round.clean_until());
                let cleanup = Cleanup::new(spec, round.token(), vec![i], until);
                self.voters.renewer.clean_up(cleanup);
            }
            (Blocked::Failed, None) => {}
        }
        Ok(WaitEnd::Broken {
            left: block.saturating_sub(started.elapsed()),
        })
    }

    /// Takes this call's waiter announcement back on every node (best effort, within the
    /// node timeout): a release then no longer keeps the lock, or a permit, for it.
    #[cold]
    pub(super) fn withdraw(&self) {
        let Some(id) = self.waiter_id() else {
            return;
        };
        let calls = withdraw_calls(&self.spec, id);
        let nodes = &self.voters.nodes;
        let deadline = Instant::now() + self.spec.node_timeout;
        net::exchange(nodes, &vec![&calls[..]; nodes.len()], deadline, None);
    }
}
