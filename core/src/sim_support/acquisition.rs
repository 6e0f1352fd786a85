//! One call that takes the lock: the core's call machine, with its rounds, verdicts and
//! steps in the simulator's types.

use super::lock::Lock;
use super::wire::{Argv, Reply, answer, argv, dur, us};
use crate::lock::clock::Stamp;
use crate::lock::proto::acquisition::{self, Then};
use crate::lock::proto::call::{AcquireCall, Verdict as CallVerdict};
use crate::lock::proto::round;
use crate::wire::NetError;

/// One call that takes the lock, across rounds (the core's `AcquireCall`), with the undo of
/// its round in flight.
pub struct Acquisition {
    call: AcquireCall,
    /// The undo of the round in flight.
    undo: Argv,
}

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
    /// What the call does next: hand it to [`Acquisition::after`] once the undo is sent.
    pub next: Next,
}

/// What became of a round.
pub enum Verdict {
    /// Held; the call's announcement is taken back with `withdraw` on `withdraw_on`, in the
    /// background.
    Held {
        /// The grant.
        grant: Grant,
        /// The requests that take the announcement back (none: nothing to take back).
        withdraw: Vec<Argv>,
        /// Where.
        withdraw_on: Vec<usize>,
    },
    /// Refused.
    Refused(Box<Refused>),
}

/// What a refused round's caller does next.
pub struct Next(round::Next);

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
        Acquisition {
            call: AcquireCall::new(&lock.spec, deadline.map(dur), dur(connect_timeout)),
            undo: Vec::new(),
        }
    }

    /// Begins a round `started` µs into the call, with `token`, its clock read at `t0` (boot,
    /// µs); `will_wait` as the wait before it said, for a round sent behind a wait; `id`: the
    /// id to announce the call by, should it need one. Returns what to send to every node.
    pub fn begin(
        &mut self,
        lock: &Lock,
        token: Vec<u8>,
        (t0, started): (u64, u64),
        will_wait: Option<bool>,
        id: &[u8],
    ) -> Vec<Argv> {
        let t0 = Stamp::from_micros(t0);
        let sent = self
            .call
            .begin(&lock.spec, token, t0, dur(started), will_wait, Some(id));
        self.undo = argv(sent.undo.call());
        sent.calls.iter().map(argv).collect()
    }

    /// The round in flight's token.
    pub fn token(&mut self) -> Vec<u8> {
        self.call.round().token().to_vec()
    }

    /// The undo of the round in flight, queued behind the requests of a node that did not
    /// answer in time.
    pub fn undo(&self) -> Argv {
        self.undo.clone()
    }

    /// Node `i`'s replies; `None` when its connection broke.
    pub fn answer(&mut self, lock: &Lock, i: usize, replies: Option<Vec<Reply>>) {
        self.call
            .round()
            .answer(i, &lock.seats[i], &answer(replies));
    }

    /// Node `i` did not answer in time.
    pub fn timed_out(&mut self, lock: &Lock, i: usize) {
        let timeout = Err(NetError::timeout());
        self.call.round().answer(i, &lock.seats[i], &timeout);
    }

    /// Notes that node `i`'s answer was left unread: the round was decided without it.
    pub fn left_unread(&mut self, lock: &Lock, i: usize) {
        self.call.round().left_unread(i, &lock.seats[i]);
    }

    /// Whether the undo goes behind the requests of the nodes a decided round leaves unread.
    pub fn undo_behind_unread(&mut self) -> bool {
        self.call.round().undo_behind_unread()
    }

    /// Whether the answers so far decide the round.
    pub fn decided(&mut self) -> bool {
        self.call.round().decided()
    }

    /// The fence write-back, if one is needed: the request and the nodes to send it to.
    pub fn fence_raise(&mut self, lock: &Lock) -> Option<(Argv, Vec<usize>)> {
        let raise = self.call.round().fence_raise(&lock.spec);
        raise.map(|(call, to)| (argv(&call), to))
    }

    /// Node `i`'s reply to the write-back (`None`: it did not come).
    pub fn raised(&mut self, lock: &Lock, i: usize, reply: Option<Reply>) {
        let answer = answer(reply.map(|r| vec![r]));
        self.call.round().raised(i, &answer, &lock.spec)
    }

    /// Whether the write-back's answers so far decide it.
    pub fn raise_decided(&mut self) -> bool {
        self.call.round().raise_decided()
    }

    /// The verdict on the round in flight at `now` (boot, µs).
    pub fn finish(&mut self, lock: &Lock, now: u64) -> Verdict {
        match self.call.finish(Stamp::from_micros(now)) {
            CallVerdict::Held { grant, withdraw } => {
                let (withdraw, withdraw_on) = match withdraw {
                    Some(w) => (lock.withdraw(&w.id), w.nodes),
                    None => (Vec::new(), Vec::new()),
                };
                Verdict::Held {
                    grant: Grant {
                        token: grant.token,
                        fence: grant.fence,
                        t0: grant.t0.micros(),
                        valid_until: grant.valid_until.micros(),
                    },
                    withdraw,
                    withdraw_on,
                }
            }
            CallVerdict::Refused { refused, next } => Verdict::Refused(Box::new(Refused {
                undo: self.undo.clone(),
                undo_on: refused.undo_on,
                clean_up: refused.clean_up,
                clean_until: refused.clean_until.micros(),
                next: Next(next),
            })),
        }
    }

    /// What the call does after a refused round, its undo sent, `elapsed` µs into the call.
    pub fn after(&mut self, next: Next, elapsed: u64, random: u64) -> Step {
        match self.call.after(next.0, dur(elapsed), random) {
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

    /// The round in flight went behind a wait whose connection broke: dropped. Returns its
    /// undo, and until when (boot, µs) a clean-up of its token is worth sending.
    pub fn abandon(&mut self) -> (Argv, u64) {
        let (_, until) = self.call.abandon();
        (self.undo.clone(), until.micros())
    }

    /// The requests that take the call's announcement back on every node as it gives up
    /// (none: it announced nothing).
    pub fn withdraw_on_giving_up(&self, lock: &Lock) -> Vec<Argv> {
        let id = self.call.withdraw_on_giving_up();
        id.map(|id| lock.withdraw(id)).unwrap_or_default()
    }

    /// The pause (µs) after a wait whose connection broke, `left` µs of it left.
    pub fn pause_after_broken_wait(&self, left: u64, random: u64) -> u64 {
        us(self.call.pause_after_broken_wait(dur(left), random))
    }

    /// A wait ended, by a wake-up signal it took (`woken`) or not.
    pub fn wait_ended(&mut self, woken: bool) {
        self.call.wait_ended(woken);
    }
}

/// A duration in `[base/2, base*3/2]` µs chosen by `random`.
pub fn jitter(base: u64, random: u64) -> u64 {
    us(acquisition::jitter(dur(base), random))
}
