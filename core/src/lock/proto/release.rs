//! The release as a state machine: which nodes to ask (again), what each answer means on the
//! lease clock's reading, and when the answers settle it.

use redis::Value;

use super::Spec;
use crate::lock::clock::Stamp;
use crate::lock::tally::{Seat, Tally};
use crate::net::Answer;

/// The release of one lease on every node.
pub(crate) struct ReleaseRound {
    valid_until: Stamp,
    quorum: usize,
    answers: Vec<Answer>,
    /// Nodes that have not answered yet (asked again after a pause).
    ask: Vec<usize>,
}

impl ReleaseRound {
    /// The release of a lease valid until `valid_until`: every node is asked.
    pub(crate) fn new(spec: &Spec, valid_until: Stamp) -> ReleaseRound {
        ReleaseRound {
            valid_until,
            quorum: spec.quorum,
            answers: (0..spec.n).map(|_| Ok(Vec::new())).collect(),
            ask: (0..spec.n).collect(),
        }
    }

    /// The nodes to send the release to now.
    pub(crate) fn asked(&self) -> &[usize] {
        &self.ask
    }

    /// Counts node `i`'s answer, received when the lease clock read `now`.
    pub(crate) fn answer(&mut self, i: usize, mut answer: Answer, now: Stamp) {
        // Within the validity, our key can only be missing because a release of ours already
        // ran there: an earlier round whose reply was lost, or the same request run twice
        // (the transport sends it again on a fresh connection when a pooled one turns out
        // dead after the write). Released, then; past the validity, missing means it
        // expired: lost.
        if now < self.valid_until
            && let Ok(values) = &mut answer
            && let Some(Ok(v @ Value::Int(0))) = values.first_mut()
        {
            *v = Value::Int(1);
        }
        self.answers[i] = answer;
    }

    /// Whether the answers so far settle the release: a quorum confirmed, or said "not
    /// yours", or every node answered. Counted without building the tally and its reports:
    /// asked after every answer, where a round over many nodes would otherwise tally (and word
    /// an error for) every node still to answer, again and again.
    pub(crate) fn settled(&self) -> bool {
        let (mut yes, mut refused, mut all_answered) = (0, 0, true);
        for answer in &self.answers {
            match answer.as_ref().map(|v| v.first()) {
                Ok(Some(Ok(Value::Int(1)))) => yes += 1,
                Ok(Some(Ok(Value::Int(_)))) => refused += 1,
                Ok(Some(Ok(_))) => {}
                _ => all_answered = false,
            }
        }
        let n = self.answers.len();
        yes >= self.quorum || refused > n - self.quorum || all_answered
    }

    /// The tally of the answers so far, and whether they settle the release (see
    /// [`settled`](Self::settled)). Otherwise the nodes that did not answer are the ones
    /// [`asked`](Self::asked) next.
    pub(crate) fn settle<S: Seat>(&mut self, seats: &[S]) -> (Tally, bool) {
        let tally = Tally::of_ints(seats, &self.answers, 0, None);
        let done = self.settled();
        let answers = &self.answers;
        self.ask
            .retain(|&i| !matches!(&answers[i], Ok(v) if matches!(v.first(), Some(Ok(_)))));
        (tally, done)
    }
}
