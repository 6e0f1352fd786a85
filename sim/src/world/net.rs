//! What the network does to one message: its delay, or its loss.

use crate::rng::Rng;

/// The fate of one message.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fate {
    /// Arrives after this many µs.
    After(u64),
    /// Never arrives; nobody is told.
    Lost,
}

/// Message delays and losses. During the fault phase the tail is long (a message can arrive
/// long after its sender gave up) and some messages are lost; once healed, delays stay
/// below `quiet_max` and nothing is lost.
#[derive(Clone, Debug)]
pub struct Network {
    /// Longest delay once healed (µs).
    pub quiet_max: u64,
    /// Longest delay of a late message while faults are on (µs).
    pub late_max: u64,
    /// Share of messages lost while faults are on.
    pub loss: f64,
    /// Share of messages that are late while faults are on.
    pub late: f64,
    /// Share of requests after which the connection is cut while faults are on.
    pub cut: f64,
}

impl Network {
    /// The fate of one message sent now.
    pub fn fate(&self, rng: &mut Rng, faulty: bool) -> Fate {
        if faulty && rng.chance(self.loss) {
            return Fate::Lost;
        }
        if faulty && rng.chance(self.late) {
            return Fate::After(rng.range(self.quiet_max, self.late_max));
        }
        // Mostly a fast loopback-like hop, sometimes a slow one within the healthy tail.
        if rng.chance(0.9) {
            Fate::After(rng.range(100, 2_000))
        } else {
            Fate::After(rng.range(2_000, self.quiet_max))
        }
    }

    /// Whether the connection is cut right after this request was written.
    pub fn cut_after_write(&self, rng: &mut Rng, faulty: bool) -> bool {
        faulty && rng.chance(self.cut)
    }
}
