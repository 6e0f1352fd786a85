//! Waiting for a release: a blocking pop on the wake-up list that a release pushes one
//! element onto, so a waiter learns of a release within about one round trip.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::{Plan, WaitEnd};
use super::calls::{pass_on_call, withdraw_calls};
use super::cleanup::Cleanup;
use super::proto::Spec;
use super::proto::call::AcquireCall;
use crate::error::Error;
use crate::net::{self, Blocked, Blocking, Lane, key_slot};
use crate::wire::Command;

/// Redis checks blocking timeouts on its cron tick (every 100 ms at the default hz 10).
const TICK: Duration = Duration::from_millis(100);

/// The `BLPOP` timeout to ask a server for, for a wait of `block`: a BLPOP may return up to a
/// tick late, so long waits ask for a tick less and usually end cleanly by the server's
/// answer; our own read deadline ends them on time either way.
fn server_block(block: Duration) -> Duration {
    if block > TICK + TICK / 2 {
        block - TICK
    } else {
        block
    }
}

/// The wait for a release signal of at most `block` on `spec`'s wake-up list, as a server
/// reads it: a `BLPOP` that takes seconds with millisecond precision (0 would mean
/// "forever"), a tick short of long waits (see `server_block`).
pub fn wake_wait(spec: &Spec, block: Duration) -> Command {
    let secs = format!("{:.3}", server_block(block).as_secs_f64().max(0.001));
    let mut blpop = redis::cmd("BLPOP");
    blpop.arg(spec.keys.wake.as_slice()).arg(secs);
    Command::keyed(blpop, key_slot(&spec.keys.wake))
}

impl Plan {
    /// Blocks on node `i` until a release signal, or `block` passes, with the next round's
    /// requests pipelined `behind` the `BLPOP` when the call says so (see `Then::Wait`):
    /// their result is returned. A wait whose connection broke says how much of it was left.
    #[inline(never)]
    pub(super) fn wait_for_release(
        &self,
        call: &mut AcquireCall,
        begun: Instant,
        i: usize,
        block: Duration,
        (will_wait, behind): (bool, bool),
    ) -> Result<WaitEnd, Error> {
        let nodes = &self.voters.nodes;
        let spec = &self.spec;
        // The client's first wait on the node blocks on a connection of its own, with the
        // round behind it; the others share one connection (see `net/hub.rs`), and make their
        // round once woken.
        let lane = nodes[i].lane(
            key_slot(&spec.keys.wake),
            Instant::now() + spec.node_timeout,
        );
        if let Lane::Shared(hub, endpoint) = &lane {
            let woken = net::has_wake_fd().then_some(&net::woken_now as &dyn Fn() -> bool);
            let until = Instant::now() + block;
            let pass = || -> net::Pass { Arc::new(pass_on_call(spec)) };
            let on = (&spec.keys.wake[..], &pass as &dyn Fn() -> net::Pass);
            if let Some(woken) = net::wait_shared((hub, endpoint), on, until, woken) {
                return Ok(WaitEnd::Ended { woken });
            }
        }
        let sent = match behind {
            // Only a call that cannot be told how the wait ends sends its round behind it.
            true => Some(self.begin(call, begun, Some(will_wait))?),
            false => None,
        };
        let started = Instant::now();
        // The wait must end on time (a crashed holder's key expires exactly then): a block
        // still pending at our deadline is ended early (see `net::block_then`).
        let wake_wait = wake_wait(spec, block);
        let slot = key_slot(&spec.keys.wake);
        let then = sent.as_ref().map_or(&[][..], |sent| &sent.calls[..]);
        let blocking = Blocking {
            node: &nodes[i],
            slot,
            command: &wake_wait,
            connect_by: started + spec.node_timeout,
            until: started + block + Duration::from_millis(2),
        };
        let then: Vec<_> = then.iter().collect();
        let blocked = net::block_then(
            blocking,
            &then,
            spec.node_timeout + spec.opts.replica_wait(),
            sent.as_ref()
                .map(|sent| &sent.undo as &dyn crate::wire::Request),
        );
        if let (
            Blocked::Ended {
                behind: Some(answer),
                woken,
            },
            Some(sent),
        ) = (&blocked, &sent)
        {
            call.wait_ended(*woken);
            super::calls::refusal(spec, std::slice::from_ref(answer))?;
            call.round().answer(i, &*nodes[i], answer);
            return Ok(WaitEnd::Attempt(self.settle(call, begun, sent, &[])));
        }
        // A round behind the wait that was not answered is over: undone behind it (see
        // `Blocked::TimedOut`), or handed to a clean-up where its undo could not follow.
        let abandoned = sent.is_some().then(|| call.abandon());
        Ok(match blocked {
            Blocked::Ended { woken, .. } => WaitEnd::Ended { woken },
            Blocked::TimedOut => WaitEnd::Ended { woken: false },
            Blocked::Failed => {
                if let Some((token, until)) = abandoned {
                    let until = self.voters.clock.instant_of(until);
                    let cleanup = Cleanup::new(spec, &token, vec![i], until);
                    self.voters.renewer.clean_up(cleanup);
                }
                WaitEnd::Broken {
                    left: block.saturating_sub(started.elapsed()),
                }
            }
        })
    }

    /// The call that waited ends: the client's shared waiting connections stop waiting on
    /// its lock's wake-up list.
    pub(super) fn forget_waits(&self) {
        for node in &self.voters.nodes {
            node.forget_wait(&self.spec.keys.wake);
        }
    }

    /// Takes this call's waiter announcement back on every node, within the node timeout: a
    /// release then no longer keeps the lock, or a permit, for it. Nodes that did not answer
    /// (or were not asked: the call's waits were told to stop) are left to a clean-up in the
    /// background, until the announcement would have lapsed anyway.
    ///
    /// `unused`: the node of a wake-up the call was given and made no round after (it was
    /// interrupted first). Behind the withdrawal there, the wake-up is passed on (`PASS_ON`:
    /// when another waiter's announcement is live), so that a waiter of another client
    /// blocked behind this one learns of the release now rather than when its wait runs out.
    #[cold]
    pub(super) fn withdraw(&self, id: &[u8], unused: Option<usize>) {
        let mut calls = withdraw_calls(&self.spec, id);
        let withdrawal = calls.len();
        if unused.is_some() {
            calls.push(pass_on_call(&self.spec));
        }
        let nodes = &self.voters.nodes;
        let per_node: Vec<&[_]> = (0..nodes.len())
            .map(|i| match unused == Some(i) {
                true => &calls[..],
                false => &calls[..withdrawal],
            })
            .collect();
        let deadline = Instant::now() + self.spec.node_timeout;
        let answers = net::exchange(nodes, &per_node, deadline, None);
        let failed: Vec<usize> = (0..nodes.len()).filter(|&i| answers[i].is_err()).collect();
        if !failed.is_empty() {
            let until = Instant::now() + self.spec.announce(true);
            let cleanup = Cleanup::withdraw(&self.spec, id, failed, until);
            self.voters.renewer.clean_up(cleanup);
        }
    }
}
