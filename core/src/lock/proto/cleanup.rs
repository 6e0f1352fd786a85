//! A clean-up's tries without I/O: whether a node's reply ends its part, and the pause before
//! the next try. A clean-up removes what a request may have stored after its sender could no
//! longer follow it on the same connection (an undo that could not be written behind it, a
//! reply lost to a reset), or a waiter's announcement; it goes on fresh connections, so it may
//! reach the node before the request it cleans up after.

use std::time::Duration;

use redis::Value;

use super::acquisition::jitter;
use super::spec::{Controls, Spec};
use crate::wire::NetError;

/// The tries of one clean-up.
#[derive(Clone, Debug)]
pub struct Tries {
    node_timeout: Duration,
    /// The base of the next pause.
    pause: Duration,
    controls: Controls,
}

impl Tries {
    /// Tries with a per-node timeout of `node_timeout`, pausing from `retry_delay` on.
    pub fn new(node_timeout: Duration, retry_delay: Duration) -> Tries {
        Tries {
            node_timeout,
            pause: retry_delay,
            controls: Controls::RIGHT,
        }
    }

    /// The tries of a clean-up of `spec`'s lock: its node timeout, pausing from its retry
    /// delay, with its controls.
    pub fn of(spec: &Spec) -> Tries {
        Tries::new(spec.node_timeout, spec.opts.retry_delay).with_controls(spec.controls)
    }

    /// The same tries with the simulator's negative controls (`Controls::RIGHT` in the
    /// library).
    pub fn with_controls(mut self, controls: Controls) -> Tries {
        self.controls = controls;
        self
    }

    /// Each try's per-node timeout.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// Whether a node's part is done, by the reply to the first call of a try that was sent
    /// `sent_after` the clean-up began (`None`: no reply, or the connection failed).
    ///
    /// Released (withdrawn): done. Gone already (`0`) or another owner's now (`-1`): done
    /// only for a try sent a node timeout after the clean-up began. The request cleaned up
    /// after was sent before the clean-up began and is given up after a node timeout: a try
    /// sent earlier may have run before it, and what it found says nothing of what that
    /// request stores when it comes (another owner may have released by then, and the late
    /// request takes the lock for nobody). The time is the try's sending, not its reply's
    /// coming: a try sent early whose reply comes late ran early.
    pub fn done(&self, reply: Option<&Result<Value, NetError>>, sent_after: Duration) -> bool {
        match reply {
            Some(Ok(Value::Int(-1))) if self.controls.another_owner_ends_cleanup => true,
            Some(Ok(Value::Int(0 | -1))) => sent_after >= self.node_timeout,
            Some(Ok(_)) => true,
            _ => false,
        }
    }

    /// The pause before the next try, jittered by `random`. Its base doubles from the retry
    /// delay, but never past two thirds of the node timeout (the jitter adds up to half): a
    /// node that comes back is cleaned up within one node timeout and one round trip, however
    /// long it was gone, and an unreachable node costs one try per node timeout meanwhile.
    pub fn next_pause(&mut self, random: u64) -> Duration {
        self.pause = (self.pause * 2)
            .min(self.node_timeout * 2 / 3)
            .max(Duration::from_millis(2));
        jitter(self.pause, random)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn tries() -> Tries {
        Tries::new(40 * MS, 5 * MS)
    }

    #[test]
    fn a_release_ends_a_nodes_part_at_once() {
        let t = tries();
        assert!(t.done(Some(&Ok(Value::Int(1))), Duration::ZERO));
    }

    /// A try sent before the request cleaned up after may have run before it: what it found
    /// (the key missing, or another owner's) is not believed; a try sent a node timeout after
    /// the clean-up began is. (Believing another owner at once left a late grant for a whole
    /// TTL in the simulator: the owner released, then the late request took the lock.)
    #[test]
    fn missing_or_another_owner_ends_a_nodes_part_only_for_a_try_sent_after_a_node_timeout() {
        let t = tries();
        for found in [0, -1] {
            assert!(!t.done(Some(&Ok(Value::Int(found))), 39 * MS));
            assert!(t.done(Some(&Ok(Value::Int(found))), 40 * MS));
        }
    }

    #[test]
    fn no_reply_or_an_error_leaves_the_node_to_the_next_try() {
        let t = tries();
        assert!(!t.done(None, 100 * MS));
        assert!(!t.done(Some(&Err(NetError::timeout())), 100 * MS));
    }

    /// The pause doubles, but its base never passes two thirds of the node timeout: after a
    /// long outage the next try still comes within one node timeout.
    #[test]
    fn the_pause_doubles_up_to_two_thirds_of_the_node_timeout() {
        let mut t = tries();
        let bases: Vec<Duration> = (0..4)
            .map(|_| {
                t.next_pause(0);
                t.pause
            })
            .collect();
        assert_eq!(bases, [10 * MS, 20 * MS, 40 * MS * 2 / 3, 40 * MS * 2 / 3]);
        assert!(t.next_pause(u64::MAX) <= 40 * MS);
    }
}
