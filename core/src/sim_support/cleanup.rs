//! A clean-up's tries as a simulated client runs them.

use super::lock::Lock;
use super::wire::{Reply, dur, us};
use crate::lock::proto::cleanup::Tries;

/// The tries of one clean-up (see the core's `proto/cleanup.rs`): when a node is done, and
/// the pause before the next try.
#[derive(Clone, Debug)]
pub struct CleanupTries(Tries);

impl Lock {
    /// The tries of a clean-up of this lock's tokens or announcements.
    pub fn cleanup_tries(&self) -> CleanupTries {
        let tries = Tries::new(self.spec.node_timeout, self.spec.opts.retry_delay);
        CleanupTries(tries.with_controls(self.spec.controls))
    }
}

impl CleanupTries {
    /// Each try's per-node timeout (µs).
    pub fn node_timeout(&self) -> u64 {
        us(self.0.node_timeout())
    }

    /// Whether a node's part is done, by the reply to the first request of a try sent
    /// `sent_after_us` after the clean-up began (`None`: no reply, or the connection broke).
    pub fn done(&self, reply: Option<&Reply>, sent_after_us: u64) -> bool {
        let reply = match reply {
            Some(Ok(v)) => Some(Ok(v.clone())),
            _ => None,
        };
        self.0.done(reply.as_ref(), dur(sent_after_us))
    }

    /// The pause before the next try (µs), jittered by `random`.
    pub fn next_pause(&mut self, random: u64) -> u64 {
        us(self.0.next_pause(random))
    }
}
