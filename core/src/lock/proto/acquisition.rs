//! One call that takes the lock, as a state machine over rounds: after each refused round,
//! whether to give up, wait for a release (where, how long), pause, or go again. Times are
//! the caller's monotonic clock, as durations since the call began; randomness comes in as
//! numbers.

use std::time::Duration;

use super::Spec;
use super::round::Next;
use crate::error::TryLockError;

/// The state of one call across its rounds.
pub(crate) struct Acquisition {
    /// When the call gives up (`None`: never).
    deadline: Option<Duration>,
    wait_cap: Duration,
    retry_delay: Duration,
    /// How long to ride over an outage.
    connect_timeout: Duration,
    n: usize,
    /// When the rounds began to find too few nodes.
    unreachable_since: Option<Duration>,
    /// Whether the call has waited for a release (only such callers may take a lock that is
    /// being handed off).
    pub(crate) waited: bool,
}

/// What to do after a refused round.
#[derive(Debug)]
pub(crate) enum Then {
    /// Return this error.
    Fail(TryLockError),
    /// Block for a release signal on node `node` for at most `block`; `will_wait` says
    /// whether the call may wait again after it.
    Wait {
        node: usize,
        block: Duration,
        will_wait: bool,
    },
    /// Sleep this long, then go again.
    Pause(Duration),
    /// Go again at once.
    Again,
}

impl Acquisition {
    /// A call that gives up at `deadline` after it began (`None`: never).
    pub(crate) fn new(
        spec: &Spec,
        deadline: Option<Duration>,
        connect_timeout: Duration,
    ) -> Acquisition {
        Acquisition {
            deadline,
            wait_cap: spec.opts.wait_cap,
            retry_delay: spec.opts.retry_delay,
            connect_timeout,
            n: spec.n,
            unreachable_since: None,
            waited: false,
        }
    }

    /// Whether a round begun at `now` may be followed by a wait (so it announces itself).
    pub(crate) fn will_wait(&self, now: Duration) -> bool {
        self.deadline.is_none_or(|d| d > now)
    }

    /// What to do after a round begun at `started` was refused with `next`, at `now`. `random`
    /// is a fresh random number (it picks the node to wait on and spreads pauses out).
    pub(crate) fn after(
        &mut self,
        next: Next,
        started: Duration,
        now: Duration,
        random: u64,
    ) -> Then {
        match next {
            Next::Busy { hint, wake_from } => {
                self.unreachable_since = None;
                let left = self.deadline.map(|d| d.saturating_sub(now));
                if left == Some(Duration::ZERO) {
                    return Then::Fail(TryLockError::WouldBlock);
                }
                let block = [hint, Some(self.wait_cap), left]
                    .into_iter()
                    .flatten()
                    .min()
                    .unwrap_or(self.wait_cap);
                self.waited = true;
                if block.is_zero() {
                    return Then::Again;
                }
                Then::Wait {
                    node: pick(&wake_from, self.n, random),
                    block,
                    will_wait: self.deadline.is_none_or(|d| d > now + block),
                }
            }
            Next::Unreachable(err) => {
                if err.is_misconfiguration() {
                    return Then::Fail(err.into());
                }
                // Ride over a short outage (a restart, a failover) for up to the connect
                // timeout, then report it rather than block forever on a dead Redis.
                let since = *self.unreachable_since.get_or_insert(started);
                let give_up = since + self.connect_timeout;
                let give_up = self.deadline.map_or(give_up, |d| d.min(give_up));
                let pause = jitter(self.retry_delay, random);
                if now + pause > give_up {
                    return Then::Fail(err.into());
                }
                Then::Pause(pause)
            }
        }
    }
}

/// The node to wait on, chosen by `random`: one of `wake_from` (nodes that said "taken"), or
/// any of the `n` when none did.
fn pick(wake_from: &[usize], n: usize, random: u64) -> usize {
    if wake_from.is_empty() {
        (random % n.max(1) as u64) as usize
    } else {
        wake_from[(random % wake_from.len() as u64) as usize]
    }
}

/// A duration in `[base/2, base*3/2]` chosen by `random`: retries from many clients spread out.
pub(crate) fn jitter(base: Duration, random: u64) -> Duration {
    let half = base / 2;
    let span = base.as_nanos() as u64;
    half + Duration::from_nanos(if span == 0 { 0 } else { random % (span + 1) })
}
