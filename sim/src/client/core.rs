//! A lock client whose every decision is made by the core's own I/O-free protocol machines
//! (`lock/proto` in the core, through `redmutex::sim_support`): the acquisition round with its
//! fence write-back and verdict, the call across rounds (wait, pause, give up), the lease
//! (renewal, loss and its reason) and the release. This file is only the driver that the
//! core's blocking transport is in a real process: it sends what the machines ask for,
//! hands them the replies and the clock readings, and keeps the timers. One call in three is
//! a `try_lock` (in a world whose lock does not fence, its round is plain commands, each a
//! message of its own, see `lock/proto/plain.rs` in the core); the others wait as long as it
//! takes. The lock is a mutex, a semaphore's permits, or a read-write lock, whose every call
//! takes a read hold or the write side at random: the machines are the same, only the scripts
//! differ, chosen by the core from the lock's kind.
//!
//! What the driver does as the core's transport does: a round is sent to every node at once
//! and ends when its answers decide it, or at its deadline; a node that did not answer in
//! time gets the round's undo queued behind its requests on the same connection, and when
//! that connection has closed (the write fails), or its connection broke, a clean-up on new
//! connections, tried as the core's clean-up machine says; a script the server lost is sent
//! again with its text; with one node, the next round goes right behind the wait on its connection, its clock read before the wait.
//! A wait whose time is up is ended early from another connection (`CLIENT UNBLOCK`), and
//! its replies (and the round's behind it) are then read on its own connection; when they do
//! not come within the node timeout, the round behind is abandoned, its undo written behind
//! it on that connection, and the connection closed (a connection that broke under a wait
//! takes the undo's way with it: the round is undone on a new connection).

mod acquire;
mod cleanup;
mod hold;
mod lock;

use std::collections::BTreeMap;

use redmutex::sim_support::{AcquireCall, Hold, ReleaseRound, Tries};

use super::model::ModelOptions;
use super::{Client, Input, Note, Now, Output, RequestId};
use crate::checker::Shape;
use crate::redis::Reply;
use crate::rng::Rng;
use crate::translate::{self, Argv};

pub use lock::Lock;

/// The lock's name on every node (the same as the model client's).
pub use super::model::LOCK;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Purpose {
    Acquire,
    /// A refused round's undo: written `behind` the request of a node left unread, or sent
    /// to a node that granted. A clean-up takes over until `until` (boot µs) when one behind
    /// cannot be written, or when one sent to a granting node fails (as the library's undo
    /// does); a failure after one behind was written is not seen (the library's connection
    /// owes its reply).
    Undo {
        until: u64,
        behind: bool,
    },
    Fence,
    Wait,
    Extend,
    Release,
    /// Try `.1` of clean-up `.0`.
    Cleanup(u64, u64),
    /// Taking a call's waiter announcement back as it gives up (best effort).
    Withdraw,
}

#[derive(Debug)]
struct Pending {
    node: usize,
    purpose: Purpose,
    argv: Argv,
}

/// What a timer was for; a timer of a phase that has passed is ignored.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Timer {
    Think,
    Retry,
    RoundDeadline(u64),
    /// The round's call is interrupted now (see [`ModelOptions::interrupts`]).
    Interrupt(u64),
    FenceDeadline(u64),
    WaitOver(u64),
    Renew(u64),
    RenewDeadline(u64),
    Use(u64),
    HoldOver(u64),
    ReleaseDeadline(u64),
    ReleaseAgain(u64),
    Cleanup(u64),
    CleanupTryOver(u64, u64),
}

/// A renewal in flight.
struct Renewing {
    t0: u64,
    ttl: u64,
    replies: Vec<Option<Vec<translate::Reply>>>,
    answered: usize,
}

enum State {
    Idle,
    /// The call's round in flight (the call holds it).
    Acquiring {
        no: u64,
        answered: Vec<bool>,
        /// Each node's replies so far (a `try_lock`'s round is several requests).
        replies: Vec<Vec<translate::Reply>>,
        /// How many requests the round sends each node.
        requests: usize,
    },
    /// Writing the fence back (or straight to the verdict, with nothing to write).
    Fencing {
        no: u64,
        /// Nodes that get the undo behind their requests when the round is refused: those
        /// that did not answer in time (the fan-out's deadline queues it there), and those
        /// left unread when the round says so (`AcquireRound::undo_behind_unread`).
        undo_behind: Vec<(usize, RequestId)>,
    },
    Waiting {
        no: u64,
        node: usize,
        /// With one node, the next round, sent right behind the wait on its connection.
        behind: Option<Behind>,
        /// When the wait's time is up (monotonic µs).
        ends: u64,
        /// The wait's time is up, and its end was asked for (`CLIENT UNBLOCK`).
        unblocking: bool,
    },
    Holding {
        no: u64,
        token: Vec<u8>,
        fence: u64,
        hold: Hold,
        renewing: Option<Renewing>,
    },
    Releasing {
        no: u64,
        release: ReleaseRound,
        /// Which asked nodes answered in the current try.
        answered: Vec<bool>,
        token: Vec<u8>,
        /// When to stop asking (monotonic µs).
        give_up: u64,
        /// Whether some node was asked again.
        retried: bool,
    },
}

/// A round sent behind a wait, on the same connection: Redis runs it the moment the wait
/// ends. The call holds it; this is how many requests it sent.
struct Behind {
    requests: usize,
}

/// A clean-up: an undo or a withdrawal that must reach some nodes on new connections (see
/// `cleanup.rs`).
struct Cleanup {
    argv: Argv,
    /// The nodes whose part is not done.
    nodes: Vec<usize>,
    /// The key has expired by itself once the boot clock reads this.
    until: u64,
    /// When it began (monotonic µs).
    began: u64,
    tries: Tries,
    /// The current try's number, and when it was sent (monotonic µs).
    tri: u64,
    sent: u64,
    /// The current try's nodes that have not answered; `None` between tries.
    waiting: Option<Vec<usize>>,
}

/// The client.
pub struct CoreClient {
    id: usize,
    opts: ModelOptions,
    /// The lock the current call takes.
    lock: Lock,
    /// A read-write lock's other side (its read holds, or its write side), which each call
    /// swaps in at random.
    other: Option<Lock>,
    state: State,
    /// The current call that takes the lock, and when it began (monotonic µs).
    call: Option<(AcquireCall, u64)>,
    /// The undo of the call's round in flight.
    undo: Argv,
    pending: BTreeMap<RequestId, Pending>,
    timers: BTreeMap<u64, Timer>,
    cleanups: BTreeMap<u64, Cleanup>,
    next: u64,
    /// A negative control: an undo that cannot be written behind its request is dropped
    /// rather than handed to a clean-up.
    forgets_unwritten_undos: bool,
    /// The current call was interrupted: it gives up after its round.
    interrupted: bool,
    /// A negative control: an interrupted round's unread nodes are left as they are, with no
    /// undo behind their requests.
    interrupt_forgets_unread: bool,
}

/// How long a call rides over an outage (µs).
const CONNECT_TIMEOUT: u64 = 1_000_000;

impl CoreClient {
    /// A client numbered `id`, with the model client's timings, of a lock of `shape` that
    /// fences or not.
    pub fn new(id: usize, opts: ModelOptions, fencing: bool, shape: Shape) -> CoreClient {
        let (lock, other) = locks(&opts, fencing, shape);
        CoreClient::with_locks(id, opts, lock, other)
    }

    /// A client of `lock` or, when `other` is given, of both sides of a read-write lock (the
    /// negative controls plug a broken lock in here).
    pub fn with_locks(
        id: usize,
        opts: ModelOptions,
        lock: Lock,
        other: Option<Lock>,
    ) -> CoreClient {
        CoreClient {
            id,
            opts,
            lock,
            other,
            state: State::Idle,
            call: None,
            undo: Vec::new(),
            pending: BTreeMap::new(),
            timers: BTreeMap::new(),
            cleanups: BTreeMap::new(),
            next: 0,
            forgets_unwritten_undos: false,
            interrupted: false,
            interrupt_forgets_unread: false,
        }
    }

    /// The same client with the transport's old rule plugged back in, for a negative
    /// control: an undo that cannot be written behind the request it follows is forgotten,
    /// so a late grant there stays for a whole TTL.
    pub fn forgetting_unwritten_undos(mut self) -> CoreClient {
        self.forgets_unwritten_undos = true;
        self
    }

    /// The same client with a wrong rule for interrupted rounds, for a negative control:
    /// their unread nodes get no undo, so a grant that arrives there stays for a whole TTL.
    pub fn forgetting_interrupted_rounds(mut self) -> CoreClient {
        self.interrupt_forgets_unread = true;
        self
    }

    /// Whether the current call's lock hands out shared holds (a permit, a read hold).
    fn shared(&self) -> bool {
        self.lock.holders_key().is_some()
    }

    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn wake(&mut self, at: u64, t: Timer, out: &mut Vec<Output>) {
        let token = self.fresh();
        self.timers.insert(token, t);
        out.push(Output::WakeAt { mono: at, token });
    }

    /// The monotonic reading at which the boot clock reads `boot` (they run at one rate).
    fn mono_of(now: Now, boot: u64) -> u64 {
        now.mono + boot.saturating_sub(now.boot)
    }

    fn send(&mut self, node: usize, argv: Argv, purpose: Purpose, out: &mut Vec<Output>) {
        self.send_after(node, argv, purpose, None, out);
    }

    /// Sends `argv` to `node`, behind request `after` on its connection when given (see
    /// [`Output::Send`]).
    fn send_after(
        &mut self,
        node: usize,
        argv: Argv,
        purpose: Purpose,
        after: Option<RequestId>,
        out: &mut Vec<Output>,
    ) {
        let id = self.fresh();
        out.push(Output::Send {
            node,
            id,
            argv: argv.clone(),
            after,
        });
        self.pending.insert(
            id,
            Pending {
                node,
                purpose,
                argv,
            },
        );
    }

    fn phase(&self) -> u64 {
        match &self.state {
            State::Idle => 0,
            State::Acquiring { no, .. }
            | State::Fencing { no, .. }
            | State::Waiting { no, .. }
            | State::Holding { no, .. }
            | State::Releasing { no, .. } => *no,
        }
    }

    fn think(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        self.state = State::Idle;
        self.call = None;
        let at = now.mono + rng.below(self.opts.think_max + 1);
        self.wake(at, Timer::Think, out);
    }

    fn on_timer(&mut self, t: Timer, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let phase = self.phase();
        let idle = matches!(self.state, State::Idle);
        match t {
            Timer::Think if idle => self.start_call(now, rng, out),
            Timer::Retry if idle && self.call.is_some() => self.start_round(now, rng, out),
            Timer::RoundDeadline(no) if no == phase => self.round_deadline(now, rng, out),
            Timer::Interrupt(no) if no == phase => self.interrupt(now, rng, out),
            Timer::FenceDeadline(no) if no == phase => self.finish_round(now, rng, out),
            Timer::WaitOver(no) if no == phase => self.wait_over(now, rng, out),
            Timer::Renew(no) if no == phase => self.renew(now, rng, out),
            Timer::RenewDeadline(no) if no == phase => self.renewal_over(now, rng, out),
            Timer::Use(no) if no == phase => self.use_it(no, now, rng, out),
            Timer::HoldOver(no) if no == phase => self.release(now, rng, out),
            Timer::ReleaseDeadline(no) if no == phase => self.release_over(now, rng, out),
            Timer::ReleaseAgain(no) if no == phase => self.send_release(now, out),
            Timer::Cleanup(no) => self.cleanup_try(no, true, now, out),
            Timer::CleanupTryOver(no, tri) => self.cleanup_try_over(no, tri, now, rng, out),
            _ => {}
        }
    }

    fn on_reply(
        &mut self,
        id: RequestId,
        reply: Option<Reply>,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        let reply = reply.map(translate::value);
        if let Some(again) = reply.as_ref().and_then(|r| translate::resend(&p.argv, r)) {
            return self.send(p.node, again, p.purpose, out);
        }
        match p.purpose {
            Purpose::Acquire => self.acquire_reply(p.node, reply, now, rng, out),
            Purpose::Fence => self.fence_reply(p.node, reply, now, rng, out),
            Purpose::Wait => self.wait_reply(p.node, reply.as_ref(), now, rng, out),
            Purpose::Extend => self.extend_reply(p.node, reply, now, rng, out),
            Purpose::Release => self.release_reply(p.node, reply, now, rng, out),
            Purpose::Cleanup(no, tri) => {
                self.cleanup_reply((no, tri), p.node, reply.as_ref(), now, rng, out)
            }
            Purpose::Undo {
                until,
                behind: false,
            } if reply.is_none() => {
                self.clean_up(p.argv, vec![p.node], until, true, now, out);
            }
            Purpose::Undo { .. } | Purpose::Withdraw => {}
        }
    }
}

/// The lock (the mutex, or a semaphore) or, for a read-write lock, both its sides: the mutex
/// and the read holds.
pub fn locks(opts: &ModelOptions, fencing: bool, shape: Shape) -> (Lock, Option<Lock>) {
    let mutex = || {
        Lock::new(
            LOCK.as_bytes(),
            opts.nodes,
            opts.ttl_ms * 1000,
            opts.node_timeout,
            opts.wait_cap,
            opts.retry_max / 2 + 1,
            opts.handoff_window,
        )
        .fencing(fencing)
    };
    match shape {
        Shape::Mutex => (mutex(), None),
        Shape::Semaphore(permits) => (mutex().semaphore(permits), None),
        Shape::RwLock => (mutex(), Some(mutex().read())),
    }
}

/// The sorted set that keeps the shared holds of a lock of `shape` (a semaphore's permits, a
/// read-write lock's read holds); `None` for a mutex.
pub fn holders_key(opts: &ModelOptions, shape: Shape) -> Option<Vec<u8>> {
    let (lock, other) = locks(opts, true, shape);
    [Some(lock), other]
        .into_iter()
        .flatten()
        .find_map(|l| l.holders_key().map(<[u8]>::to_vec))
}

impl Client for CoreClient {
    fn handle(&mut self, input: Input, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        match input {
            Input::Start => self.think(now, rng, out),
            Input::Wake { token } => {
                if let Some(t) = self.timers.remove(&token) {
                    self.on_timer(t, now, rng, out);
                }
            }
            Input::Reply { id, reply, .. } => self.on_reply(id, Some(reply), now, rng, out),
            Input::Failed { id, .. } => self.on_reply(id, None, now, rng, out),
            Input::Unwritten { id, .. } => self.undo_unwritten(id, now, out),
        }
    }
}
