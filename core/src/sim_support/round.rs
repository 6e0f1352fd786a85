//! One acquisition round and what it sends.

use super::lock::Lock;
use super::wire::{Argv, Reply, answer, argv};
use crate::lock::clock::Stamp;
use crate::lock::proto::round::{self, AcquireRound, Requests};
use crate::wire::NetError;

/// One acquisition round (the core's `AcquireRound`) and what it sends.
pub struct Round(pub(super) AcquireRound, pub(super) Requests);

/// A round's grant.
pub struct Grant {
    /// The token.
    pub token: Vec<u8>,
    /// The fence.
    pub fence: u64,
    /// When the round was sent (boot clock, µs).
    pub t0: u64,
    /// When the validity ends (boot clock, µs).
    pub valid_until: u64,
    /// Where the call takes its waiter announcement back, in the background (the core's
    /// `Grant::withdraw_on`).
    pub withdraw_on: Vec<usize>,
}

/// A refused round.
pub struct Refused {
    /// The undo request.
    pub undo: Argv,
    /// Nodes to send it to now.
    pub undo_on: Vec<usize>,
    /// Nodes to clean up on fresh connections, until the boot clock reads `clean_until`.
    pub clean_up: Vec<usize>,
    /// See `clean_up`.
    pub clean_until: u64,
    /// What the call does next.
    pub next: Next,
}

/// What a refused round's caller does next.
pub struct Next(pub(super) round::Next);

impl Round {
    /// A round with `token` whose clock read `t0` (boot, µs); `waited`: whether the call has
    /// waited, and whether its last wait was woken (see `Acquisition::waited`).
    pub fn new(
        lock: &Lock,
        token: Vec<u8>,
        t0: u64,
        waited: (bool, bool),
        will_wait: bool,
        waiter: &[u8],
    ) -> Round {
        let announce = lock.spec.announce(will_wait);
        let (round, sent) = AcquireRound::new(
            &lock.spec,
            token,
            Stamp::from_micros(t0),
            waited,
            announce,
            if will_wait || waited.0 { waiter } else { b"" },
        );
        Round(round, sent)
    }

    /// The round's token.
    pub fn token(&self) -> &[u8] {
        self.0.token()
    }

    /// Until when (boot, µs) a clean-up of the round's token is worth sending, when its
    /// requests went behind a wait that broke.
    pub fn clean_until(&self) -> u64 {
        self.0.clean_until().micros()
    }

    /// What to send to every node.
    pub fn requests(&self) -> Vec<Argv> {
        self.1.calls.iter().map(argv).collect()
    }

    /// The undo queued behind the requests of a node that did not answer in time.
    pub fn undo(&self) -> Argv {
        argv(self.1.undo.call())
    }

    /// Node `i`'s replies; `None` when its connection broke.
    pub fn answer(&mut self, lock: &Lock, i: usize, replies: Option<Vec<Reply>>) {
        self.0.answer(i, &lock.seats[i], &answer(replies));
    }

    /// Node `i` did not answer in time.
    pub fn timed_out(&mut self, lock: &Lock, i: usize) {
        self.0.answer(i, &lock.seats[i], &Err(NetError::timeout()));
    }

    /// Notes that node `i`'s answer was left unread: the round was decided without it.
    pub fn left_unread(&mut self, lock: &Lock, i: usize) {
        self.0.left_unread(i, &lock.seats[i]);
    }

    /// Whether the undo goes behind the requests of the nodes a decided round leaves unread.
    pub fn undo_behind_unread(&self) -> bool {
        self.0.undo_behind_unread()
    }

    /// Whether the answers so far decide the round.
    pub fn decided(&self) -> bool {
        self.0.decided()
    }

    /// Whether a quorum granted.
    pub fn granted(&self) -> bool {
        self.0.granted()
    }

    /// The fence write-back, if one is needed: the request and the nodes to send it to.
    pub fn fence_raise(&mut self, lock: &Lock) -> Option<(Argv, Vec<usize>)> {
        self.0
            .fence_raise(&lock.spec)
            .map(|(call, behind)| (argv(&call), behind))
    }

    /// Node `i`'s reply to the write-back (`None`: it did not come).
    pub fn raised(&mut self, lock: &Lock, i: usize, reply: Option<Reply>) {
        self.0
            .raised(i, &answer(reply.map(|r| vec![r])), &lock.spec)
    }

    /// Whether the write-back's answers so far decide it (a quorum holds the fence, or
    /// cannot).
    pub fn raise_decided(&self) -> bool {
        self.0.raise_decided()
    }

    /// The verdict at `now` (boot, µs); `announced`: whether an earlier round of the call
    /// announced it (see [`Acquisition::announced`](super::Acquisition::announced)).
    pub fn finish(self, now: u64, announced: bool) -> Result<Grant, Box<Refused>> {
        match self.0.finish(Stamp::from_micros(now), announced) {
            Ok(g) => Ok(Grant {
                token: g.token,
                fence: g.fence,
                t0: g.t0.micros(),
                valid_until: g.valid_until.micros(),
                withdraw_on: g.withdraw_on,
            }),
            Err(r) => Err(Box::new(Refused {
                undo: argv(self.1.undo.call()),
                undo_on: r.undo_on,
                clean_up: r.clean_up,
                clean_until: r.clean_until.micros(),
                next: Next(r.next),
            })),
        }
    }
}
