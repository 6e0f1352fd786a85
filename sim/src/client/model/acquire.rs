//! Acquire rounds: scatter the acquire script, gather to a quorum, settle the fence, undo.

use super::*;

impl ModelClient {
    pub(super) fn start_round(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let no = self.fresh();
        let token = format!("client{}:{:016x}", self.id, rng.next_u64()).into_bytes();
        out.push(Output::Note(Note::Attempt {
            token: token.clone(),
        }));
        // t0 before the first request leaves: every grant's expiry starts after it.
        let round = Round {
            no,
            token: token.clone(),
            t0: now.boot,
            ..Round::default()
        };
        for node in 0..self.opts.nodes {
            self.acquire_on(node, &token, out);
        }
        self.state = State::Acquiring(round);
        self.wake(
            now.mono + self.opts.node_timeout,
            Timer::RoundDeadline(no),
            out,
        );
        // A round unanswered after a quarter of the node timeout is sent again on a fresh
        // connection. With the own-grant control, every round is: a retry of something that
        // already ran, whose reply may overtake the first one's.
        let resend_after = if self.opts.controls.own_grant_taken {
            1
        } else {
            self.opts.node_timeout / 4
        };
        self.wake(now.mono + resend_after, Timer::Resend(no), out);
    }

    pub(super) fn acquire_on(&mut self, node: usize, token: &[u8], out: &mut Vec<Output>) {
        // Announce ourselves as a waiter for as long as our longest wait, as the core does.
        let announce = (self.opts.wait_cap + self.opts.node_timeout) / 1000 + 10;
        let waited = if self.waited { b"1" } else { b"0" };
        let args = [
            token.to_vec(),
            Self::ms(self.opts.ttl_ms),
            b"1".to_vec(),
            waited.to_vec(),
            Self::ms(announce),
            // The id this client announces itself by (one acquisition at a time).
            format!("waiter:{}", self.id).into_bytes(),
        ];
        self.script(
            node,
            "acquire",
            &[LOCK, FENCE, READERS, WAITERS],
            &args,
            Purpose::Acquire,
            out,
        );
    }

    /// Ends a round: holds, writes the fence back, or undoes and retries.
    pub(super) fn settle(&mut self, now: Now, rng: &mut Rng, out: &mut Vec<Output>) {
        let State::Acquiring(round) = std::mem::replace(&mut self.state, State::Idle) else {
            return;
        };
        if round.granted.len() >= self.quorum() {
            let fence = *round.granted.values().max().expect("a quorum is not empty");
            let behind: Vec<usize> = round
                .granted
                .iter()
                .filter(|(_, f)| **f < fence)
                .map(|(n, _)| *n)
                .collect();
            if behind.is_empty() {
                return self.hold(round, fence, now, rng, out);
            }
            for &node in &behind {
                self.script(
                    node,
                    "fence_max",
                    &[FENCE, LOCK],
                    &[Self::ms(fence), round.token.clone()],
                    Purpose::FenceWrite,
                    out,
                );
            }
            self.wake(
                now.mono + self.opts.node_timeout,
                Timer::FenceDeadline(round.no),
                out,
            );
            self.state = State::Fencing(round, fence, behind);
            return;
        }
        self.fail_round(round, now, rng, out);
    }

    pub(super) fn fail_round(
        &mut self,
        round: Round,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        self.pending.retain(|_, p| {
            !matches!(
                p.purpose,
                Purpose::Acquire | Purpose::FenceRead | Purpose::FenceWrite
            )
        });
        for node in 0..self.opts.nodes {
            if self.opts.controls.own_grant_taken && round.taken.contains_key(&node) {
                continue;
            }
            self.release_on(node, &round.token, Purpose::Undo, out);
        }
        out.push(Output::Note(Note::AttemptOver {
            token: round.token.clone(),
        }));
        // Taken: wait for a release signal, at most the holder's PTTL (capped). A split
        // vote or a late grant: nobody may hold it, so retry after a short random pause.
        let taken: Vec<usize> = round.taken.keys().copied().collect();
        let hint = round.taken.values().min().copied().unwrap_or(0);
        let block = hint.min(self.opts.wait_cap);
        if !taken.is_empty() && round.granted.len() < self.quorum() && block > 0 {
            let node = *rng.pick(&taken);
            return self.wait_for_release(node, block, now, out);
        }
        let delay = rng.below(self.opts.retry_max + 1);
        self.wake(now.mono + delay, Timer::Retry, out);
    }

    /// Blocks in BLPOP on `node`'s wake-up list for at most `block` µs, then retries.
    fn wait_for_release(&mut self, node: usize, block: u64, now: Now, out: &mut Vec<Output>) {
        let no = self.fresh();
        self.state = State::Waiting { no, node };
        // Long waits ask the server for a cron tick (100 ms) less, so they usually end by
        // the server's answer rather than by our own deadline.
        let server_block = if block > 150_000 {
            block - 100_000
        } else {
            block
        };
        let secs = format!("{:.3}", (server_block as f64 / 1e6).max(0.001));
        let argv = vec![
            b"BLPOP".to_vec(),
            WAKE.as_bytes().to_vec(),
            secs.into_bytes(),
        ];
        self.send(node, argv, None, Purpose::Wait, out);
        self.wake(now.mono + block + 2_000, Timer::WaitOver(no), out);
    }

    /// Re-sends, on a new connection, each acquire not answered after a quarter of the
    /// round's time (a client retry policy that a slow network triggers).
    pub(super) fn resend(&mut self, out: &mut Vec<Output>) {
        let State::Acquiring(round) = &mut self.state else {
            return;
        };
        if round.resent {
            return;
        }
        round.resent = true;
        let token = round.token.clone();
        let silent: Vec<usize> = (0..self.opts.nodes)
            .filter(|n| !round.answered.contains(n))
            .collect();
        for node in silent {
            self.pending
                .retain(|_, p| !(p.node == node && p.purpose == Purpose::Acquire));
            out.push(Output::Reconnect { node });
            self.acquire_on(node, &token, out);
        }
    }

    pub(super) fn on_reply(
        &mut self,
        id: RequestId,
        reply: Reply,
        now: Now,
        rng: &mut Rng,
        out: &mut Vec<Output>,
    ) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        if let (Reply::Error(e), Some(source)) = (&reply, p.source)
            && e.starts_with("NOSCRIPT")
        {
            let mut argv = p.argv.clone();
            argv[0] = b"EVAL".to_vec();
            argv[1] = source.as_bytes().to_vec();
            return self.send(p.node, argv, None, p.purpose, out);
        }
        let quorum = self.quorum();
        let nodes = self.opts.nodes;
        let own_taken = self.opts.controls.own_grant_taken;
        match (&mut self.state, p.purpose) {
            (State::Acquiring(round), Purpose::Acquire) => {
                if round.answered.contains(&p.node) {
                    return;
                }
                round.answered.push(p.node);
                match reply {
                    Reply::Int(fence) => {
                        round.granted.insert(p.node, fence.max(0) as u64);
                    }
                    Reply::Array(items) if items.len() == 3 => {
                        let pttl = match items[1] {
                            Reply::Int(ms) if ms > 0 => ms as u64 * 1000,
                            _ => 0,
                        };
                        let ours = items[2] == Reply::Bulk(round.token.clone());
                        if ours && !own_taken {
                            // Our own earlier copy stored it: the node granted. Its fence is
                            // the counter there (at least the number our copy drew).
                            round.answered.retain(|n| *n != p.node);
                            let argv = vec![b"GET".to_vec(), FENCE.as_bytes().to_vec()];
                            return self.send(p.node, argv, None, Purpose::FenceRead, out);
                        } else {
                            round.taken.insert(p.node, pttl);
                        }
                    }
                    _ => {}
                }
                let refused = round.answered.len() - round.granted.len();
                if round.granted.len() >= quorum
                    || refused > nodes - quorum
                    || round.answered.len() == nodes
                {
                    self.settle(now, rng, out);
                }
            }
            (State::Acquiring(round), Purpose::FenceRead) => {
                let fence = match &reply {
                    Reply::Bulk(b) => String::from_utf8_lossy(b).parse().unwrap_or(0),
                    _ => 0,
                };
                if !round.answered.contains(&p.node) {
                    round.answered.push(p.node);
                    round.granted.insert(p.node, fence);
                }
                let refused = round.answered.len() - round.granted.len();
                if round.granted.len() >= quorum
                    || refused > nodes - quorum
                    || round.answered.len() == nodes
                {
                    self.settle(now, rng, out);
                }
            }
            (State::Waiting { .. }, Purpose::Wait) => {
                self.waited = true;
                self.start_round(now, rng, out);
            }
            (State::Fencing(_, _, behind), Purpose::FenceWrite) => {
                // Only a confirmed write counts: a node that failed keeps its lower counter,
                // and the round then ends at its deadline without the lock.
                if reply == Reply::Int(1) {
                    behind.retain(|n| *n != p.node);
                }
                if behind.is_empty()
                    && let State::Fencing(round, fence, _) =
                        std::mem::replace(&mut self.state, State::Idle)
                {
                    self.hold(round, fence, now, rng, out);
                }
            }
            (State::Holding(hold), Purpose::Extend) => {
                if let Some((_, _, ok, no)) = &mut hold.renewal {
                    if reply == Reply::Int(1) {
                        ok.push(p.node);
                    } else {
                        *no += 1;
                    }
                    if ok.len() >= quorum || *no > nodes - quorum {
                        self.renewal_over(now, rng, out);
                    }
                }
            }
            _ => {}
        }
    }
}
