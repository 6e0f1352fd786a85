//! How many samples of everything, full or quick.

use std::time::Duration;

use crate::stats::thousands;

pub struct Counts {
    pub rounds: usize,
    pub per_round: usize,
    pub per_round_redlock: usize,
    /// How many chunks the external (Python, C) uncontended rows are measured in.
    pub chunks: usize,
    pub handoff: usize,
    pub handoff_compare: usize,
    pub settle: (Duration, Duration),
    pub processes: usize,
    pub sections: usize,
    pub renew_locks: usize,
    pub renew_hold: Duration,
    pub renew_ttl: Duration,
    pub python_n: usize,
    pub c_n: usize,
    pub churn: usize,
    /// How long each blocked-waiter row waits.
    pub waiter_wait: Duration,
}

impl Counts {
    pub fn new(quick: bool) -> Counts {
        if quick {
            Counts {
                rounds: 40,
                per_round: 10,
                per_round_redlock: 2,
                chunks: 4,
                handoff: 50,
                handoff_compare: 15,
                settle: (Duration::from_millis(2), Duration::from_millis(6)),
                processes: 4,
                sections: 100,
                renew_locks: 1_000,
                renew_hold: Duration::from_secs(4),
                renew_ttl: Duration::from_secs(3),
                python_n: 200,
                c_n: 200,
                churn: 5_000,
                waiter_wait: Duration::from_secs(1),
            }
        } else {
            Counts {
                rounds: 500,
                per_round: 10,
                per_round_redlock: 2,
                chunks: 10,
                handoff: 1_000,
                handoff_compare: 200,
                settle: (Duration::from_millis(5), Duration::from_millis(25)),
                processes: 4,
                sections: 500,
                renew_locks: 10_000,
                renew_hold: Duration::from_secs(10),
                renew_ttl: Duration::from_secs(3),
                python_n: 2_000,
                c_n: 5_000,
                churn: 20_000,
                waiter_wait: Duration::from_secs(3),
            }
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "uncontended {} samples per row (in {} rounds; redlock {}), handoff {} samples \
             (comparisons {}; settle {}–{} ms), contended {} × {} sections, renew {} locks for {} s \
             (TTL {} s), Python {} samples per row",
            self.rounds * self.per_round,
            self.rounds,
            self.rounds * self.per_round_redlock,
            self.handoff,
            self.handoff_compare,
            self.settle.0.as_millis(),
            self.settle.1.as_millis(),
            self.processes,
            self.sections,
            thousands(self.renew_locks as u64),
            self.renew_hold.as_secs(),
            self.renew_ttl.as_secs(),
            self.python_n
        )
    }
}
