//! Holding: renewal every `ttl/3` within the validity, and release.

use super::*;

impl ModelClient {
    pub(super) fn hold(
        &mut self,
        round: Round,
        fence: u64,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let valid_until = self.validity(round.t0, now, self.opts.ttl_ms);
        if now.boot >= valid_until {
            return self.fail_round(round, now, rng, out);
        }
        self.pending.retain(|_, p| {
            !matches!(
                p.purpose,
                Purpose::Acquire | Purpose::FenceRead | Purpose::FenceWrite
            )
        });
        out.push(Output::Note(Note::Acquired {
            token: round.token.clone(),
            fence,
            valid_until,
            shared: false,
        }));
        let no = round.no;
        self.state = State::Holding(Hold {
            no,
            token: round.token,
            fence,
            valid_until,
            renewal: None,
        });
        let ttl = self.opts.ttl_ms * 1000;
        self.wake(now.mono + ttl / 3, Timer::Renew(no), out);
        self.wake(
            now.mono + rng.below(self.opts.hold_max + 1),
            Timer::HoldOver(no),
            out,
        );
        self.wake(now.mono + self.opts.use_every, Timer::Use(no), out);
    }

    pub(super) fn renew(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let ttl_ms = if self.opts.controls.unconditional_extend {
            self.opts.ttl_ms / 2 + rng.below(self.opts.ttl_ms / 2 + 1)
        } else {
            self.opts.ttl_ms
        };
        let State::Holding(hold) = &mut self.state else {
            return;
        };
        hold.renewal = Some((now.boot, ttl_ms, Vec::new(), 0));
        let (no, token) = (hold.no, hold.token.clone());
        self.pending.retain(|_, p| p.purpose != Purpose::Extend);
        for node in 0..self.opts.nodes {
            self.script(
                node,
                "extend",
                &[LOCK],
                &[token.clone(), Self::ms(ttl_ms)],
                Purpose::Extend,
                out,
            );
        }
        self.wake(
            now.mono + self.opts.node_timeout,
            Timer::RenewDeadline(no),
            out,
        );
    }

    /// Stops holding: the checker hears it before any release request leaves.
    pub(super) fn release(&mut self, lost: bool, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let State::Holding(hold) = std::mem::replace(&mut self.state, State::Idle) else {
            return;
        };
        out.push(Output::Note(if lost {
            Note::Lost
        } else {
            Note::Releasing
        }));
        self.pending.clear();
        for node in 0..self.opts.nodes {
            self.release_on(node, &hold.token, Purpose::Release, out);
        }
        self.think(now, rng, out);
    }

    /// A renewal's time is up: it counts if a quorum confirmed within the validity.
    pub(super) fn renewal_over(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let quorum = self.quorum();
        let State::Holding(hold) = &mut self.state else {
            return;
        };
        let Some((t0, ttl_ms, ok, _)) = hold.renewal.take() else {
            return;
        };
        let (no, valid_until) = (hold.no, hold.valid_until);
        if ok.len() >= quorum {
            let until = self.validity(t0, now, ttl_ms);
            if let State::Holding(hold) = &mut self.state {
                hold.valid_until = until;
            }
            out.push(Output::Note(Note::Extended { valid_until: until }));
            self.wake(
                now.mono + self.opts.ttl_ms * 1000 / 3,
                Timer::Renew(no),
                out,
            );
        } else if now.boot < valid_until {
            // Retry inside the validity.
            self.wake(now.mono + self.opts.node_timeout, Timer::Renew(no), out);
        } else {
            self.release(true, now, rng, out);
        }
    }
}
