//! Driving the acquisition: the call across rounds, each round to its verdict, the fence
//! write-back, the undo of a refused round, and the wait for a release.

use std::time::Duration;

use redis::Value;

use super::*;
use crate::translate::{answer, argv, dur, micros, stamp, timed_out, us};
use redmutex::sim_support::{Then, Verdict, wake_wait};

impl CoreClient {
    /// A call that takes the lock: a `lock` that waits as long as it takes, or (one call in
    /// three) a `try_lock`, which gives up after its first refused round and, when the lock
    /// does not fence, asks with plain commands rather than the script; a client whose
    /// `try_lock` failed calls again after its pause.
    /// On a read-write lock, each call is a read or a write at random.
    pub(super) fn start_call(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        if let Some(other) = &mut self.other
            && rng.chance(0.5)
        {
            std::mem::swap(&mut self.lock, other);
        }
        out.push(Output::Note(Note::Wants {
            shared: self.shared(),
        }));
        let deadline = rng.chance(1.0 / 3.0).then_some(Duration::ZERO);
        self.interrupted = false;
        let connect_timeout = dur(CONNECT_TIMEOUT);
        self.call = Some((
            AcquireCall::new(&self.lock.spec, deadline, connect_timeout),
            now.mono,
        ));
        self.start_round(now, rng, out);
    }

    pub(super) fn start_round(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let Some(requests) = self.new_round(now, rng, None, out) else {
            return;
        };
        for node in 0..self.opts.nodes {
            for argv in &requests {
                self.send(node, argv.clone(), Purpose::Acquire, out);
            }
        }
        self.acquiring(requests.len(), now, out);
        // A signal comes while the round waits for its answers, one round in ten: the call
        // watches every wait (`wake_on_checked`), and its check says stop.
        if self.opts.interrupts && rng.chance(0.1) {
            let State::Acquiring { no, .. } = self.state else {
                return;
            };
            let at = now.mono + rng.below(self.opts.node_timeout);
            self.wake(at, Timer::Interrupt(no), out);
        }
    }

    /// The call is interrupted while its round waits for answers: the round ends as at its
    /// deadline (the library's reads end as timed out, and the fan-out writes the undo behind
    /// the requests left unread), and the call gives up after it.
    pub(super) fn interrupt(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        self.interrupted = true;
        self.round_deadline(now, rng, out);
    }

    /// Begins the call's next round, its attempt noted, not sent: returns its requests.
    /// `will_wait`: whether the call may wait after it, when the wait before it has said so
    /// already.
    fn new_round(
        &mut self,
        now: Now,
        rng: &mut Rng,
        will_wait: Option<bool>,
        out: &mut Vec<Output>,
    ) -> Option<Vec<Argv>> {
        // A reader's announcement is also among the waiting readers: a write call of the
        // same client must not go by its id.
        let reading = self.other.is_some() && self.shared();
        let waiter = self.waiter_id(reading);
        let (call, begun) = self.call.as_mut()?;
        let started = now.mono - *begun;
        let token = format!("client{}:{:016x}", self.id, rng.next_u64()).into_bytes();
        out.push(Output::Note(Note::Attempt {
            token: token.clone(),
        }));
        // t0 before the first request leaves: every grant's expiry starts after it.
        let t0 = stamp(now.boot);
        let spec = &self.lock.spec;
        let sent = call.begin(spec, token, t0, dur(started), will_wait, Some(&waiter));
        self.undo = argv(sent.undo.call());
        Some(sent.calls.iter().map(argv).collect())
    }

    /// Collects the answers of the call's round, sent (`requests` requests to each node),
    /// until they decide it or a node timeout from now.
    fn acquiring(&mut self, requests: usize, now: Now, out: &mut Vec<Output>) {
        let no = self.fresh();
        self.state = State::Acquiring {
            no,
            answered: vec![false; self.opts.nodes],
            replies: vec![Vec::new(); self.opts.nodes],
            requests,
        };
        let deadline = now.mono + self.opts.node_timeout;
        self.wake(deadline, Timer::RoundDeadline(no), out);
    }

    /// The wait on `node` ended (`answered`), or its connection broke. A round behind it is
    /// answered next on the same connection; otherwise the call goes on with a new round.
    pub(super) fn wait_reply(
        &mut self,
        node: usize,
        reply: Option<&translate::Reply>,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let answered = reply.is_some();
        let State::Waiting {
            node: n, behind, ..
        } = &self.state
        else {
            return;
        };
        // A broken wait with nothing behind it: its timer goes on with a new round.
        if *n != node || (behind.is_none() && !answered) {
            return;
        }
        let State::Waiting { behind, ends, .. } = std::mem::replace(&mut self.state, State::Idle)
        else {
            return;
        };
        // As the library reads it: woken when the `BLPOP` popped an element.
        let woken = matches!(reply, Some(Ok(Value::Array(_))));
        if answered && let Some((call, _)) = &mut self.call {
            call.wait_ended(woken);
        }
        match behind {
            Some(b) if answered => self.acquiring(b.requests, now, out),
            Some(_) => self.behind_lost(node, ends, now, rng, out),
            None => self.start_round(now, rng, out),
        }
    }

    /// The wait's time is up: its end is asked for from another connection (`CLIENT
    /// UNBLOCK`), as the library does, and its reply and the round's behind it are awaited
    /// for the node timeout more. When that is up too, its connection is closed, and the
    /// call goes on: a round behind the wait is abandoned, its undo written behind it on
    /// that connection before it closes (the library's block that timed out, `failed` in
    /// `net/block.rs`); where that write fails, a clean-up takes over (`undo_unwritten`).
    pub(super) fn wait_over(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        if let State::Waiting {
            no,
            node,
            unblocking: unblocking @ false,
            ..
        } = &mut self.state
        {
            *unblocking = true;
            let (no, node) = (*no, *node);
            out.push(Output::Unblock { node });
            self.wake(now.mono + self.opts.node_timeout, Timer::WaitOver(no), out);
            return;
        }
        let State::Waiting { node, behind, .. } = std::mem::replace(&mut self.state, State::Idle)
        else {
            return;
        };
        // The round's first request behind the wait, for its undo to follow.
        let first = self
            .pending
            .iter()
            .find(|(_, p)| p.purpose == Purpose::Acquire && p.node == node)
            .map(|(id, _)| *id);
        self.pending
            .retain(|_, p| !matches!(p.purpose, Purpose::Wait | Purpose::Acquire));
        let Some((call, _)) = &mut self.call else {
            return;
        };
        let abandoned = behind.map(|_| (call.round().token().to_vec(), call.abandon()));
        // As the library's block that timed out: a wait that ran out.
        call.wait_ended(false);
        if let Some((token, (_, until))) = abandoned {
            let purpose = Purpose::Undo {
                until: micros(until),
                behind: true,
            };
            self.send_after(node, self.undo.clone(), purpose, first, out);
            out.push(Output::Note(Note::AttemptOver { token }));
        }
        out.push(Output::Reconnect { node });
        self.start_round(now, rng, out)
    }

    /// The wait's connection broke with a round behind it: the round may have run, and its
    /// undo can no longer follow it on that connection. It is undone on a new one, in the
    /// background (the library's failed block), and the call goes on after the pause its
    /// call says (the wait ended at `ends`).
    fn behind_lost(
        &mut self,
        node: usize,
        ends: u64,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        self.pending.retain(|_, p| p.purpose != Purpose::Acquire);
        let Some((call, _)) = &mut self.call else {
            return;
        };
        let token = call.round().token().to_vec();
        let (_, until) = call.abandon();
        let left = dur(ends.saturating_sub(now.mono));
        let pause = us(call.pause_after_broken_wait(left, rng.next_u64()));
        let undo = self.undo.clone();
        self.clean_up(undo, vec![node], micros(until), true, now, out);
        out.push(Output::Note(Note::AttemptOver { token }));
        self.wake(now.mono + pause, Timer::Retry, out);
    }

    pub(super) fn acquire_reply(
        &mut self,
        node: usize,
        reply: Option<translate::Reply>,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let State::Acquiring {
            answered,
            replies,
            requests,
            ..
        } = &mut self.state
        else {
            return;
        };
        let Some((call, _)) = &mut self.call else {
            return;
        };
        if answered[node] {
            return;
        }
        // A node answers once all of the round's requests to it have their replies (or its
        // connection broke).
        let seat = &self.lock.seats[node];
        match reply {
            Some(r) => {
                replies[node].push(r);
                if replies[node].len() < *requests {
                    return;
                }
                let replies = std::mem::take(&mut replies[node]);
                call.round().answer(node, seat, &answer(Some(replies)));
            }
            None => call.round().answer(node, seat, &answer(None)),
        }
        answered[node] = true;
        if call.round().decided() || answered.iter().all(|a| *a) {
            self.settle_round(false, now, rng, out);
        }
    }

    /// The round's time is up: the nodes that have not answered did not answer in time (as
    /// the library's fan-out answers them at its deadline). They stay silent here: the undo
    /// goes behind their requests.
    pub(super) fn round_deadline(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        if let State::Acquiring { answered, .. } = &self.state
            && let Some((call, _)) = &mut self.call
        {
            for node in (0..answered.len()).filter(|&n| !answered[n]) {
                call.round()
                    .answer(node, &self.lock.seats[node], &timed_out());
            }
        }
        self.settle_round(true, now, rng, out);
    }

    /// The round's answers are in (or its time is up: `timed_out`): write the fence back, or
    /// finish.
    pub(super) fn settle_round(
        &mut self,
        timed_out: bool,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        if !matches!(self.state, State::Acquiring { .. }) {
            return;
        }
        let State::Acquiring { no, answered, .. } = std::mem::replace(&mut self.state, State::Idle)
        else {
            return;
        };
        let Some((call, _)) = &mut self.call else {
            return;
        };
        // Each unread node's first request of the round: its undo is written behind the
        // round's requests on the same connection, which must still be the first one's (a
        // connection that closed between them took the first ones with it).
        let silent: Vec<(usize, RequestId)> = (0..answered.len())
            .filter(|&n| !answered[n])
            .filter_map(|n| {
                let mut sent = self.pending.iter();
                sent.find(|(_, p)| p.purpose == Purpose::Acquire && p.node == n)
                    .map(|(id, _)| (n, *id))
            })
            .collect();
        self.pending.retain(|_, p| p.purpose != Purpose::Acquire);
        for &(node, _) in &silent {
            call.round().left_unread(node, &self.lock.seats[node]);
        }
        let undo_behind = match timed_out || call.round().undo_behind_unread() {
            _ if self.interrupted && self.interrupt_forgets_unread => Vec::new(),
            true => silent,
            false => Vec::new(),
        };
        if let Some((raise, to)) = call.round().fence_raise(&self.lock.spec) {
            let raise = argv(&raise);
            for &node in &to {
                self.send(node, raise.clone(), Purpose::Fence, out);
            }
            self.state = State::Fencing { no, undo_behind };
            self.wake(
                now.mono + self.opts.node_timeout,
                Timer::FenceDeadline(no),
                out,
            );
            return;
        }
        self.state = State::Fencing { no, undo_behind };
        self.finish_round(now, rng, out);
    }

    pub(super) fn fence_reply(
        &mut self,
        node: usize,
        reply: Option<translate::Reply>,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let (State::Fencing { .. }, Some((call, _))) = (&self.state, &mut self.call) else {
            return;
        };
        let raised = answer(reply.map(|r| vec![r]));
        call.round().raised(node, &raised, &self.lock.spec);
        // It ends at its quorum (or once every node asked answered): the later answers are
        // not waited for.
        if call.round().raise_decided() {
            self.finish_round(now, rng, out);
        }
    }

    /// The verdict: the lease, or the undo and the call's next step.
    pub(super) fn finish_round(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        if !matches!(self.state, State::Fencing { .. }) {
            return;
        }
        let State::Fencing {
            no, undo_behind, ..
        } = std::mem::replace(&mut self.state, State::Idle)
        else {
            return;
        };
        self.pending.retain(|_, p| p.purpose != Purpose::Fence);
        let Some((call, _)) = &mut self.call else {
            return;
        };
        let token = call.round().token().to_vec();
        let (refused, next) = match call.finish(stamp(now.boot)) {
            // A late grant of a node that has not answered yet is part of the lock: its
            // renewals and its release go to every node.
            Verdict::Held { grant, withdraw } => {
                let until = now.boot + us(self.lock.spec.announce(true));
                if let Some(w) = withdraw {
                    for argv in self.lock.withdraw(&w.id) {
                        self.clean_up(argv, w.nodes.clone(), until, false, now, out);
                    }
                }
                return self.hold(no, grant, now, rng, out);
            }
            Verdict::Refused { refused, next } => (refused, next),
        };
        // Behind a request whose answer did not come, in order on the same connection: a
        // late grant is undone as it runs. Where it cannot be written there, a clean-up
        // takes over (see `undo_unwritten`).
        let until = micros(refused.clean_until);
        let undo = self.undo.clone();
        for &(node, after) in &undo_behind {
            let purpose = Purpose::Undo {
                until,
                behind: true,
            };
            self.send_after(node, undo.clone(), purpose, Some(after), out);
        }
        for &node in &refused.undo_on {
            if !undo_behind.iter().any(|(n, _)| *n == node) {
                let purpose = Purpose::Undo {
                    until,
                    behind: false,
                };
                self.send(node, undo.clone(), purpose, out);
            }
        }
        if !refused.clean_up.is_empty() {
            self.clean_up(undo, refused.clean_up.clone(), until, true, now, out);
        }
        out.push(Output::Note(Note::AttemptOver { token }));
        let Some((call, begun)) = &mut self.call else {
            return;
        };
        let then = match self.interrupted {
            // The library's interrupt check says stop before the call's next step.
            true => None,
            false => Some(call.after(next, dur(now.mono - *begun), rng.next_u64())),
        };
        match then {
            None | Some(Then::Fail(_)) => {
                // The call takes its announcement back (see `Acquisition::announced` in the
                // core).
                let id = call.withdraw_on_giving_up();
                let withdraw = id.map(|id| self.lock.withdraw(id)).unwrap_or_default();
                for argv in withdraw {
                    for node in 0..self.opts.nodes {
                        self.send(node, argv.clone(), Purpose::Withdraw, out);
                    }
                }
                out.push(Output::Note(Note::GaveUp));
                self.think(now, rng, out);
            }
            Some(Then::Again) => self.start_round(now, rng, out),
            Some(Then::Pause(d)) => self.wake(now.mono + us(d), Timer::Retry, out),
            Some(Then::Wait {
                node,
                block,
                will_wait,
                behind,
            }) => {
                let block = us(block);
                // The next round right behind the wait when the call says so.
                let behind = behind
                    .then(|| self.new_round(now, rng, Some(will_wait), out))
                    .flatten();
                let no = self.fresh();
                let blpop = argv(&wake_wait(&self.lock.spec, dur(block)));
                self.send(node, blpop, Purpose::Wait, out);
                let behind = behind.map(|requests| {
                    for argv in &requests {
                        self.send(node, argv.clone(), Purpose::Acquire, out);
                    }
                    Behind {
                        requests: requests.len(),
                    }
                });
                self.state = State::Waiting {
                    no,
                    node,
                    behind,
                    ends: now.mono + block,
                    unblocking: false,
                };
                self.wake(now.mono + block + 2_000, Timer::WaitOver(no), out);
            }
        }
    }

    /// The id a call of this client announces itself by; a reader's is also among the
    /// waiting readers, so a write call of the same client must not go by it.
    fn waiter_id(&self, reading: bool) -> Vec<u8> {
        format!("{}:{}", ["waiter", "reader"][usize::from(reading)], self.id).into_bytes()
    }
}
