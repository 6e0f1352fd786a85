//! Driving the lease: renewals when the lease machine says they are due, what their answers
//! mean, use of the resource inside the hold, loss, and the release round.

use super::*;
use crate::translate::{answer, argv, dur, micros, stamp, tally, timed_out, us};
use redmutex::LossReason;
use redmutex::sim_support::{
    Due, Extended, Grant, Why, extend_call, jitter, release_call, released,
};

impl CoreClient {
    pub(super) fn hold(
        &mut self,
        no: u64,
        grant: Grant,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        out.push(Output::Note(Note::Acquired {
            token: grant.token.clone(),
            fence: grant.fence,
            valid_until: micros(grant.valid_until),
            shared: self.shared(),
        }));
        let hold = Hold::new(&self.lock.spec, grant.t0, grant.valid_until);
        let first = Self::mono_of(now, micros(hold.next_at(grant.t0)));
        self.state = State::Holding {
            no,
            token: grant.token,
            fence: grant.fence,
            hold,
            renewing: None,
        };
        self.call = None;
        self.wake(first, Timer::Renew(no), out);
        let over = now.mono + rng.below(self.opts.hold_max + 1);
        self.wake(over, Timer::HoldOver(no), out);
        self.wake(now.mono + self.opts.use_every, Timer::Use(no), out);
    }

    pub(super) fn renew(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let State::Holding {
            no,
            token,
            hold,
            renewing,
            ..
        } = &mut self.state
        else {
            return;
        };
        let no = *no;
        match hold.due(stamp(now.boot)) {
            Due::Forget => {}
            Due::RanOut(_) => self.lost(now, rng, out),
            Due::At(at) => self.wake(Self::mono_of(now, micros(at)), Timer::Renew(no), out),
            Due::Renew(ttl) => {
                *renewing = Some(Renewing {
                    t0: now.boot,
                    ttl: us(ttl),
                    replies: vec![None; self.opts.nodes],
                    answered: 0,
                });
                let argv = argv(&extend_call(&self.lock.spec, token, ttl));
                self.pending.retain(|_, p| p.purpose != Purpose::Extend);
                for node in 0..self.opts.nodes {
                    self.send(node, argv.clone(), Purpose::Extend, out);
                }
                let deadline = now.mono + self.opts.node_timeout;
                self.wake(deadline, Timer::RenewDeadline(no), out);
            }
        }
    }

    pub(super) fn extend_reply(
        &mut self,
        node: usize,
        reply: Option<translate::Reply>,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let State::Holding {
            renewing: Some(r), ..
        } = &mut self.state
        else {
            return;
        };
        r.replies[node] = reply.map(|r| vec![r]);
        r.answered += 1;
        if r.answered == self.opts.nodes {
            self.renewal_over(now, rng, out);
        }
    }

    /// A renewal's answers are in, or its time is up: the lease machine decides.
    pub(super) fn renewal_over(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let State::Holding {
            no, hold, renewing, ..
        } = &mut self.state
        else {
            return;
        };
        let Some(r) = renewing.take() else {
            return;
        };
        let no = *no;
        self.pending.retain(|_, p| p.purpose != Purpose::Extend);
        let tally = tally(&self.lock.seats, &r.replies);
        match hold.extended(stamp(r.t0), dur(r.ttl), &tally, stamp(now.boot), false) {
            Extended::Renewed(next) => {
                let valid_until = micros(hold.valid_until);
                out.push(Output::Note(Note::Extended { valid_until }));
                self.wake(Self::mono_of(now, micros(next)), Timer::Renew(no), out);
            }
            Extended::Retry(at) => self.wake(Self::mono_of(now, micros(at)), Timer::Renew(no), out),
            Extended::Lost(why) => {
                hold.lose(why);
                self.lost(now, rng, out)
            }
            Extended::Gone => {}
        }
    }

    /// The holder acts on the resource, but only while the lease machine says it holds.
    pub(super) fn use_it(&mut self, no: u64, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let State::Holding { fence, hold, .. } = &self.state else {
            return;
        };
        if hold.is_held(stamp(now.boot)) {
            out.push(Output::Note(Note::Use { fence: *fence }));
            self.wake(now.mono + self.opts.use_every, Timer::Use(no), out);
        } else {
            self.lost(now, rng, out);
        }
    }

    /// The holder learned it lost the lock: it stops, and removes its key in the background.
    fn lost(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        if !matches!(self.state, State::Holding { .. }) {
            return;
        }
        let State::Holding {
            token, mut hold, ..
        } = std::mem::replace(&mut self.state, State::Idle)
        else {
            return;
        };
        out.push(Output::Note(Note::Lost));
        hold.lose(Why::new(LossReason::ValidityRanOut, "lost", Vec::new()));
        self.pending.retain(|_, p| p.purpose != Purpose::Extend);
        let argv = argv(&release_call(&self.lock.spec, &token, false));
        let until = now.boot + self.opts.ttl_ms * 1000 + self.opts.node_timeout;
        self.clean_up(argv, (0..self.opts.nodes).collect(), until, true, now, out);
        self.think(now, rng, out);
    }

    /// The user releases: the checker hears it before any request leaves.
    pub(super) fn release(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        if !matches!(self.state, State::Holding { .. }) {
            return;
        }
        let State::Holding {
            no,
            token,
            mut hold,
            ..
        } = std::mem::replace(&mut self.state, State::Idle)
        else {
            return;
        };
        if !hold.is_held(stamp(now.boot)) {
            self.state = State::Holding {
                no,
                token,
                fence: 0,
                hold,
                renewing: None,
            };
            return self.lost(now, rng, out);
        }
        out.push(Output::Note(Note::Releasing));
        self.pending.retain(|_, p| p.purpose != Purpose::Extend);
        let _ = hold.release(stamp(now.boot));
        let valid_until = hold.valid_until;
        let give_up = (now.mono + CONNECT_TIMEOUT).min(Self::mono_of(now, micros(valid_until)));
        self.state = State::Releasing {
            no,
            release: ReleaseRound::new(&self.lock.spec, valid_until),
            answered: vec![false; self.opts.nodes],
            token,
            give_up,
            retried: false,
        };
        self.send_release(now, out);
    }

    /// Sends the release to the nodes the release machine asks.
    pub(super) fn send_release(&mut self, now: Now, out: &mut Vec<Output>) {
        let State::Releasing {
            no,
            release,
            answered,
            token,
            ..
        } = &mut self.state
        else {
            return;
        };
        let no = *no;
        let argv = argv(&release_call(&self.lock.spec, token, true));
        let asked = release.asked().to_vec();
        for a in answered.iter_mut() {
            *a = true;
        }
        for &node in &asked {
            answered[node] = false;
        }
        for node in asked {
            self.send(node, argv.clone(), Purpose::Release, out);
        }
        let deadline = now.mono + self.opts.node_timeout;
        self.wake(deadline, Timer::ReleaseDeadline(no), out);
    }

    pub(super) fn release_reply(
        &mut self,
        node: usize,
        reply: Option<translate::Reply>,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let State::Releasing {
            release, answered, ..
        } = &mut self.state
        else {
            return;
        };
        let at = stamp(now.boot);
        release.answer(node, answer(reply.map(|r| vec![r])), at);
        answered[node] = true;
        // Like the core, a release ends at its quorum: the others still run.
        let (_, settled) = release.settle(&self.lock.seats);
        if settled || answered.iter().all(|a| *a) {
            self.release_over(now, rng, out);
        }
    }

    /// A release round's answers are in, or its time is up: settled, or ask again.
    pub(super) fn release_over(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let State::Releasing {
            no,
            release,
            answered,
            give_up,
            retried,
            ..
        } = &mut self.state
        else {
            return;
        };
        let no = *no;
        for (node, done) in answered.iter().enumerate() {
            if !done {
                release.answer(node, timed_out(), stamp(now.boot));
            }
        }
        self.pending.retain(|_, p| p.purpose != Purpose::Release);
        let (tally, done) = release.settle(&self.lock.seats);
        let result = released(&self.lock.spec, &tally);
        let base = dur(self.opts.retry_max / 2 + 1);
        let pause = us(jitter(base, rng.next_u64()));
        if done || now.mono + pause > *give_up {
            out.push(Output::Note(Note::Released {
                clean: result.is_ok(),
                retried: *retried,
            }));
            return self.think(now, rng, out);
        }
        *retried = true;
        self.wake(now.mono + pause, Timer::ReleaseAgain(no), out);
    }
}
