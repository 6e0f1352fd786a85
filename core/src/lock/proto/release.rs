//! The release as a state machine: which nodes to ask (again), what each answer means on the
//! lease clock's reading, and when the answers settle it.
//!
//! "Missing" (the key is gone, or holds a hand-off's empty value) means the release did
//! nothing there. Within the validity that is a loss, not a release: the key can vanish by
//! eviction, `FLUSHALL` or `DEL` from an operator, a restart without persistence or a failover
//! to a replica that lacked it, and a holder told "released" would never learn that another
//! owner may have held the lock meanwhile. Only one "missing" is our own doing: the answer to
//! a release asked again, on a node that the earlier attempt may have reached (it timed out or
//! its connection broke after the request was written, and Redis runs whatever reached its
//! socket). That one counts as released; every other "missing" counts as missing, and the
//! caller's tally turns too few releases into `Lost`. The simulator's negative control plugs
//! the old rule back in (every "missing" within the validity is a release:
//! [`Controls::missing_is_released`]), and its checker must catch the hidden loss.

use redis::Value;

use super::{Controls, Spec};
use crate::error::ErrorKind;
use crate::lock::clock::Stamp;
use crate::lock::tally::{Seat, Tally};
use crate::wire::{Answer, Failure};

/// The release of one lease on every node.
pub struct ReleaseRound {
    valid_until: Stamp,
    quorum: usize,
    answers: Vec<Answer>,
    /// Nodes that have not answered yet (asked again after a pause).
    ask: Vec<usize>,
    /// Nodes that an earlier attempt of this release may have reached: it failed after its
    /// request may have run there.
    reached: Vec<bool>,
    controls: Controls,
}

impl ReleaseRound {
    /// The release of a lease valid until `valid_until`: every node is asked.
    pub fn new(spec: &Spec, valid_until: Stamp) -> ReleaseRound {
        ReleaseRound {
            valid_until,
            quorum: spec.quorum,
            answers: (0..spec.n).map(|_| Ok(Vec::new())).collect(),
            ask: (0..spec.n).collect(),
            reached: vec![false; spec.n],
            controls: spec.controls,
        }
    }

    /// The nodes to send the release to now.
    pub fn asked(&self) -> &[usize] {
        &self.ask
    }

    /// Counts node `i`'s answer, received when the lease clock read `now`.
    pub fn answer(&mut self, i: usize, mut answer: Answer, now: Stamp) {
        // Our own earlier attempt, within the validity (past it, missing means it expired).
        let ours = self.reached[i] || self.controls.missing_is_released;
        if ours
            && now < self.valid_until
            && let Ok(values) = &mut answer
            && let Some(Ok(v @ Value::Int(0))) = values.first_mut()
        {
            *v = Value::Int(1);
        }
        let failed = match &answer {
            Err(e) => Some(e),
            Ok(values) => match values.first() {
                Some(Err(e)) => Some(e),
                _ => None,
            },
        };
        // A refused connection, a refused login or a server that answered with an error ran
        // nothing; a timeout or a broken connection may have run the request.
        if let Some(e) = failed
            && matches!(
                e.failure(),
                Failure::Timeout | Failure::Dropped | Failure::Io
            )
        {
            self.reached[i] = true;
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
    pub fn settle<S: Seat>(&mut self, seats: &[S]) -> (Tally, bool) {
        let tally = Tally::of_ints(seats, &self.answers, 0, None);
        let done = self.settled();
        let answers = &self.answers;
        self.ask
            .retain(|&i| !matches!(&answers[i], Ok(v) if matches!(v.first(), Some(Ok(_)))));
        (tally, done)
    }
}

/// What a settled release's `tally` says: released when a quorum confirmed it and no more
/// than `n - quorum` nodes said "not ours"; otherwise [`ErrorKind::Lost`] when more did (the
/// lock was lost before its release), or [`ErrorKind::NoQuorum`] (too few answered; the
/// lock expires by its TTL).
pub fn released(spec: &Spec, tally: &Tally) -> Result<(), ErrorKind> {
    if tally.refused > spec.n - spec.quorum {
        Err(ErrorKind::Lost)
    } else if tally.yes >= spec.quorum {
        Ok(())
    } else {
        Err(ErrorKind::NoQuorum)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::lock::Keys;
    use crate::options::MutexOptions;
    use crate::wire::NetError;

    use crate::lock::proto::testing::N;

    const SEATS: [N; 3] = [N("n0"), N("n1"), N("n2")];

    fn round(n: usize) -> ReleaseRound {
        let spec = Spec::new(
            Arc::new(Keys::new(b"job")),
            MutexOptions::default(),
            Duration::from_millis(50),
            n,
        )
        .expect("valid options");
        ReleaseRound::new(&spec, at(1_000))
    }
    fn at(ms: u64) -> Stamp {
        Stamp::from_micros(ms * 1000)
    }
    fn int(i: i64) -> Answer {
        Ok(vec![Ok(Value::Int(i))])
    }
    fn refused() -> Answer {
        Err(NetError::new(
            Failure::Refused,
            std::io::ErrorKind::ConnectionRefused,
            "refused".into(),
        ))
    }

    /// A key that vanished while held (evicted, deleted, flushed) is no release: the first
    /// answer "missing" within the validity counts as missing.
    #[test]
    fn a_first_answer_missing_within_the_validity_is_not_a_release() {
        let mut r = round(1);
        r.answer(0, int(0), at(10));
        let (tally, done) = r.settle(&SEATS[..1]);
        assert!(done);
        assert_eq!((tally.yes, tally.refused, tally.missing), (0, 1, 1));
    }

    /// Asked again after a timeout (the earlier request may have run), "missing" is the
    /// earlier attempt's own release.
    #[test]
    fn missing_on_a_retry_after_a_timeout_is_our_earlier_release() {
        let mut r = round(1);
        r.answer(0, Err(NetError::timeout()), at(10));
        let (_, done) = r.settle(&SEATS[..1]);
        assert!(!done);
        assert_eq!(r.asked(), [0]);
        r.answer(0, int(0), at(20));
        let (tally, done) = r.settle(&SEATS[..1]);
        assert!(done);
        assert_eq!((tally.yes, tally.refused), (1, 0));
    }

    /// An earlier attempt whose connection was refused reached nothing: "missing" on the
    /// retry is missing.
    #[test]
    fn missing_on_a_retry_after_a_refused_connection_is_missing() {
        let mut r = round(1);
        r.answer(0, refused(), at(10));
        let _ = r.settle(&SEATS[..1]);
        r.answer(0, int(0), at(20));
        let (tally, _) = r.settle(&SEATS[..1]);
        assert_eq!((tally.yes, tally.missing), (0, 1));
    }

    /// Past the validity, "missing" means it expired, even on a retry.
    #[test]
    fn missing_past_the_validity_is_missing_even_on_a_retry() {
        let mut r = round(1);
        r.answer(0, Err(NetError::timeout()), at(10));
        let _ = r.settle(&SEATS[..1]);
        r.answer(0, int(0), at(1_000));
        let (tally, _) = r.settle(&SEATS[..1]);
        assert_eq!((tally.yes, tally.missing), (0, 1));
    }

    /// It settles at a quorum of releases, or once more than `n - quorum` nodes said "not
    /// yours" (missing or another owner's), or when every node answered.
    #[test]
    fn it_settles_at_a_quorum_either_way() {
        let mut r = round(3);
        r.answer(0, int(1), at(10));
        assert!(!r.settled());
        r.answer(2, int(1), at(10));
        assert!(r.settled());
        let mut r = round(3);
        r.answer(0, int(0), at(10));
        r.answer(1, int(-1), at(10));
        assert!(r.settled());
        let (tally, _) = r.settle(&SEATS);
        assert_eq!((tally.refused, tally.missing), (2, 1));
        assert_eq!(r.asked(), [2]);
    }

    /// The old rule, which the simulator's negative control plugs back in: every "missing"
    /// within the validity read as released.
    #[test]
    fn the_negative_controls_old_rule_reads_every_missing_as_released() {
        let mut r = round(1);
        r.controls.missing_is_released = true;
        r.answer(0, int(0), at(10));
        let (tally, _) = r.settle(&SEATS[..1]);
        assert_eq!(tally.yes, 1);
    }
}
