//! One call that takes the lock, across rounds.

use super::lock::Lock;
use super::round::Next;
use super::wire::{dur, us};
use crate::lock::proto::acquisition::{self, Acquisition as Calls, Then};

/// One call that takes the lock, across rounds.
pub struct Acquisition(Calls);

/// What to do after a refused round.
#[derive(Debug)]
pub enum Step {
    /// Give up, with this error.
    Fail(String),
    /// Wait for a release on `node` for `block` µs.
    Wait {
        /// The node.
        node: usize,
        /// µs.
        block: u64,
        /// Whether the call may wait again afterwards.
        will_wait: bool,
        /// Whether the next round goes right behind the wait (see the core's `Then::Wait`).
        behind: bool,
    },
    /// Pause this long (µs).
    Pause(u64),
    /// Go again now.
    Again,
}

impl Acquisition {
    /// A call that gives up `deadline` µs after it began (`None`: never), riding over
    /// outages for `connect_timeout` µs.
    pub fn new(lock: &Lock, deadline: Option<u64>, connect_timeout: u64) -> Acquisition {
        Acquisition(Calls::new(
            &lock.spec,
            deadline.map(dur),
            dur(connect_timeout),
        ))
    }

    /// The pause (µs) after a wait whose connection broke, `left` µs of it left.
    pub fn pause_after_broken_wait(&self, left: u64, random: u64) -> u64 {
        us(self.0.pause_after_broken_wait(dur(left), random))
    }

    /// Whether the call has waited for a release, and whether its last wait was ended by a
    /// wake-up signal (until the round after it).
    pub fn waited(&self) -> (bool, bool) {
        (self.0.waited, self.0.woken())
    }

    /// A wait ended, by a wake-up signal it took (`woken`) or not.
    pub fn wait_ended(&mut self, woken: bool) {
        self.0.wait_ended(woken);
    }

    /// Whether a refused round announced the call as a waiter: it takes the announcement back
    /// when it gives up, and where a later grant does not.
    pub fn announced(&self) -> bool {
        self.0.announced()
    }

    /// Whether a round begun `now` µs into the call may be followed by a wait.
    pub fn will_wait(&self, now: u64) -> bool {
        self.0.will_wait(dur(now))
    }

    /// After a refused round begun at `started`, at `now` (µs into the call).
    pub fn after(&mut self, next: Next, started: u64, now: u64, random: u64) -> Step {
        match self.0.after(next.0, dur(started), dur(now), random) {
            Then::Fail(e) => Step::Fail(e.to_string()),
            Then::Wait {
                node,
                block,
                will_wait,
                behind,
            } => Step::Wait {
                node,
                block: us(block),
                will_wait,
                behind,
            },
            Then::Pause(d) => Step::Pause(us(d)),
            Then::Again => Step::Again,
        }
    }
}

/// A duration in `[base/2, base*3/2]` µs chosen by `random`.
pub fn jitter(base: u64, random: u64) -> u64 {
    us(acquisition::jitter(dur(base), random))
}
