//! The lease's and the release's machines, for the simulator.

use super::acquisition::Grant;
use super::lock::Lock;
use super::wire::{Reply, answer, dur, us};
use crate::lock::clock::Stamp;
use crate::lock::proto::hold::{self, Extended, Hold as HoldState};
use crate::lock::proto::release::{ReleaseRound, released};
use crate::stats::LossReason;
use crate::wire::NetError;

/// A lease's state (the core's `proto::hold::Hold`).
pub struct Hold(HoldState);

/// What a lease needs now.
#[derive(Debug, PartialEq)]
pub enum Due {
    /// Nothing more.
    Forget,
    /// Its validity ran out: lost, for this reason.
    RanOut(String),
    /// Look again when the boot clock reads this (µs).
    At(u64),
    /// Renew it with this TTL (µs).
    Renew(u64),
}

/// What an extension's answers did.
#[derive(Debug, PartialEq)]
pub enum Renewal {
    /// Confirmed; valid until (boot µs); look again at (boot µs).
    Renewed {
        /// Boot µs.
        valid_until: u64,
        /// Boot µs.
        next: u64,
    },
    /// Try again at (boot µs).
    Retry(u64),
    /// Lost, for this reason.
    Lost(String),
    /// Already released or lost.
    Gone,
}

impl Hold {
    /// The lease of `grant`.
    pub fn new(lock: &Lock, grant: &Grant) -> Hold {
        Hold(HoldState::new(
            &lock.spec,
            Stamp::from_micros(grant.t0),
            Stamp::from_micros(grant.valid_until),
        ))
    }

    /// Whether it is held at `now` (boot µs).
    pub fn is_held(&self, now: u64) -> bool {
        self.0.is_held(Stamp::from_micros(now))
    }

    /// When to look first after a grant or renewal at `t0` (boot µs).
    pub fn next_at(&self, t0: u64) -> u64 {
        self.0.next_at(Stamp::from_micros(t0)).micros()
    }

    /// What it needs at `now` (boot µs).
    pub fn due(&self, now: u64) -> Due {
        match self.0.due(Stamp::from_micros(now)) {
            hold::Due::Forget => Due::Forget,
            hold::Due::RanOut(why) => Due::RanOut(why.text),
            hold::Due::At(at) => Due::At(at.micros()),
            hold::Due::Renew(ttl) => Due::Renew(us(ttl)),
        }
    }

    /// Applies the replies to an extension sent at `t0` with `ttl` (µs), at `now`.
    pub fn extended(
        &mut self,
        lock: &Lock,
        t0: u64,
        ttl: u64,
        replies: &[Option<Vec<Reply>>],
        now: u64,
    ) -> Renewal {
        let tally = lock.tally(replies);
        let at = Stamp::from_micros;
        match self.0.extended(at(t0), dur(ttl), &tally, at(now), false) {
            Extended::Renewed(next) => Renewal::Renewed {
                valid_until: self.0.valid_until.micros(),
                next: next.micros(),
            },
            Extended::Retry(at) => Renewal::Retry(at.micros()),
            Extended::Lost(why) => {
                let text = why.text.clone();
                self.0.lose(why);
                Renewal::Lost(text)
            }
            Extended::Gone => Renewal::Gone,
        }
    }

    /// Marks it lost (as its validity running out does).
    pub fn lose(&mut self, why: String) {
        self.0
            .lose(hold::Why::new(LossReason::ValidityRanOut, why, Vec::new()));
    }

    /// Marks it released at `now`; the validity deadline (boot µs) for the release round.
    pub fn release(&mut self, now: u64) -> u64 {
        let _ = self.0.release(Stamp::from_micros(now));
        self.0.valid_until.micros()
    }
}

/// A release round (the core's `ReleaseRound`).
pub struct Release(ReleaseRound);

impl Release {
    /// The release of a lease valid until `valid_until` (boot µs).
    pub fn new(lock: &Lock, valid_until: u64) -> Release {
        Release(ReleaseRound::new(
            &lock.spec,
            Stamp::from_micros(valid_until),
        ))
    }

    /// The nodes to send it to now.
    pub fn asked(&self) -> Vec<usize> {
        self.0.asked().to_vec()
    }

    /// Node `i`'s replies (`None`: its connection broke), at `now` (boot µs).
    pub fn answer(&mut self, i: usize, replies: Option<Vec<Reply>>, now: u64) {
        self.0.answer(i, answer(replies), Stamp::from_micros(now));
    }

    /// Node `i` did not answer in time.
    pub fn timed_out(&mut self, i: usize, now: u64) {
        self.0
            .answer(i, Err(NetError::timeout()), Stamp::from_micros(now));
    }

    /// Whether the release is settled; `Ok` when a quorum confirmed, else the error kind's
    /// name.
    pub fn settle(&mut self, lock: &Lock) -> (bool, Result<(), String>) {
        let (tally, done) = self.0.settle(&lock.seats);
        let result = released(&lock.spec, &tally).map_err(|kind| format!("{kind:?}"));
        (done, result)
    }
}
