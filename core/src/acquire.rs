//! The acquire loop: Redlock rounds, the fence write-back, and waiting for a release.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::error::{Error, ErrorKind, NodeOutcome, TryLockError};
use crate::guard::{GuardShared, MutexGuard, millis, release_call};
use crate::keys::{Keys, key_slot};
use crate::mutex::{Mutex, bytes, int};
use crate::node;
use crate::options::{MAX_NAME_LEN, MIN_TTL, default_node_timeout, drift};
use crate::quorum::{self, Tally};
use crate::scripts::{self, Call};
use crate::token;

/// One acquisition attempt's result.
enum Attempt {
    Held(MutexGuard),
    /// Someone else holds it (or a split vote): wait, preferably on one of these nodes.
    Busy {
        hint: Option<Duration>,
        wake_from: Vec<usize>,
    },
    /// Fewer than a quorum of nodes answered.
    Unreachable(Error),
}

/// The requests of one acquisition round.
struct Round {
    token: Vec<u8>,
    /// Sent to every node: the acquire script, then any `WAIT`.
    calls: Vec<Call>,
    /// Releases this round's token: for grants the round does not keep.
    undo: Call,
}

/// What one acquisition call settles once, before its first attempt.
pub(crate) struct Plan {
    pub(crate) keys: Arc<Keys>,
    pub(crate) node_timeout: Duration,
    pub(crate) label: String,
}

impl Mutex {
    pub(crate) fn plan(&self) -> Result<Plan, Error> {
        let name = &self.keys.lock;
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "a lock name must be 1 to {MAX_NAME_LEN} bytes, got {}",
                name.len()
            )));
        }
        self.opts.validate()?;
        let inner = &self.client.inner;
        let node_timeout = self
            .opts
            .node_timeout
            .or(inner.node_timeout)
            .unwrap_or_else(|| default_node_timeout(self.opts.ttl));
        Ok(Plan {
            keys: Arc::clone(&self.keys),
            node_timeout,
            label: inner.label(),
        })
    }

    pub(crate) fn acquire(
        &self,
        deadline: Option<Instant>,
        mut interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<MutexGuard, TryLockError> {
        let plan = self.plan()?;
        let mut waited = false;
        let mut unreachable_since: Option<Instant> = None;
        // An attempt already made while waiting for a release.
        let mut made: Option<Attempt> = None;
        loop {
            let started = Instant::now();
            let will_wait = deadline.is_none_or(|d| d > started);
            let attempt = match made.take() {
                Some(a) => a,
                None => self.attempt(&plan, waited, will_wait)?,
            };
            match attempt {
                Attempt::Held(guard) => return Ok(guard),
                Attempt::Busy { hint, wake_from } => {
                    unreachable_since = None;
                    let now = Instant::now();
                    let left = deadline.map(|d| d.saturating_duration_since(now));
                    if left == Some(Duration::ZERO) {
                        return Err(TryLockError::WouldBlock);
                    }
                    let block = [hint, Some(self.opts.wait_cap), left]
                        .into_iter()
                        .flatten()
                        .min()
                        .unwrap_or(self.opts.wait_cap);
                    let will_wait = deadline.is_none_or(|d| d > now + block);
                    made = self.wait_for_release(&plan, &wake_from, block, will_wait)?;
                    waited = true;
                }
                Attempt::Unreachable(err) => {
                    if err.is_misconfiguration() {
                        return Err(err.into());
                    }
                    // Ride over a short outage (a restart, a failover) for up to the connect
                    // timeout, then report it rather than block forever on a dead Redis.
                    let since = *unreachable_since.get_or_insert(started);
                    let give_up = since + self.client.inner.connect_timeout;
                    let give_up = deadline.map_or(give_up, |d| d.min(give_up));
                    let pause = token::jitter(self.opts.retry_delay);
                    let now = Instant::now();
                    if now + pause > give_up {
                        return Err(err.into());
                    }
                    std::thread::sleep(pause);
                }
            }
            if let Some(check) = interrupted.as_mut()
                && check()
            {
                return Err(Error::new(ErrorKind::Interrupted, "the wait was interrupted").into());
            }
        }
    }

    /// One Redlock round: ask every node at once, count the grants, check the validity.
    fn attempt(&self, plan: &Plan, waited: bool, will_wait: bool) -> Result<Attempt, Error> {
        let nodes = &self.client.inner.nodes;
        let round = self.round(plan, waited, will_wait)?;
        // Before t0: opening a fresh client's first connections is not the lease's time.
        let slot = key_slot(&plan.keys.lock);
        quorum::warm_up(nodes, |_| Some(slot));
        let t0 = Instant::now();
        let answers = quorum::exchange(
            nodes,
            &vec![&round.calls[..]; nodes.len()],
            t0 + plan.node_timeout + self.opts.replica_wait(),
            Some(&round.undo),
        );
        self.settle(plan, &round, t0, answers)
    }

    /// The requests of one round: a new token, the acquire script (and, with min_replicas,
    /// a `WAIT` after it on the same connection, so it waits for exactly that write), and
    /// the undo that releases a grant the round does not keep.
    fn round(&self, plan: &Plan, waited: bool, will_wait: bool) -> Result<Round, Error> {
        let opts = &self.opts;
        let keys = &plan.keys;
        let token = token::new_token(&plan.label)?;
        let announce = if will_wait {
            opts.wait_cap + plan.node_timeout + Duration::from_millis(10)
        } else {
            Duration::ZERO
        };
        let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
        let acquire = Call::new(
            &scripts::ACQUIRE,
            &[&keys.lock, &keys.fence, &keys.waiters, &keys.handoff],
            &[
                &token,
                &millis(self.grant_ttl()),
                flag(opts.fencing),
                flag(waited),
                &millis(announce),
            ],
        );
        let undo = release_call(keys, &token, opts, false);
        let mut calls = vec![acquire];
        if let Some((replicas, timeout)) = opts.min_replicas {
            calls.push(Call::wait(replicas, timeout));
        }
        Ok(Round { token, calls, undo })
    }

    /// Counts a round's answers (sent at `t0`): a guard when a quorum granted within the
    /// validity; otherwise every grant is undone and the caller learns whether to wait.
    fn settle(
        &self,
        plan: &Plan,
        round: &Round,
        t0: Instant,
        answers: Vec<quorum::NodeAnswer>,
    ) -> Result<Attempt, Error> {
        let inner = &self.client.inner;
        let nodes = &inner.nodes;
        let n = nodes.len();
        let opts = &self.opts;
        let keys = &plan.keys;
        let undo = &round.undo;
        let mut tally = Tally::default();
        let mut granted: Vec<(usize, u64)> = Vec::new();
        let mut hint: Option<Duration> = None;
        let mut wake_from = Vec::new();
        let mut failed_midway = Vec::new();
        for (i, (node, answer)) in nodes.iter().zip(answers).enumerate() {
            let (answer, waited) = match answer {
                Ok(mut v) => {
                    let waited = (v.len() > 1).then(|| v.pop()).flatten();
                    (Ok(v.pop()), waited)
                }
                Err(e) => (Err(e), None),
            };
            match answer {
                Ok(Some(Ok(Value::Array(items))))
                    if int(items.first().unwrap_or(&Value::Nil)) == 1 =>
                {
                    let outcome = match opts.min_replicas {
                        Some((wanted, _)) => quorum::replicas_outcome(waited.as_ref(), wanted),
                        None => NodeOutcome::Ok,
                    };
                    if outcome == NodeOutcome::Ok {
                        granted.push((i, int(items.get(1).unwrap_or(&Value::Nil)).max(0) as u64));
                    } else {
                        // The node granted, but too few replicas have it: undo it there.
                        failed_midway.push(i);
                    }
                    tally.push(node, outcome);
                }
                Ok(Some(Ok(Value::Array(items)))) if items.len() == 3 => {
                    let pttl = int(&items[1]);
                    if pttl >= 0 {
                        let d = Duration::from_millis(pttl as u64);
                        hint = Some(hint.map_or(d, |h| h.min(d)));
                    } else if pttl == -2 {
                        hint = Some(Duration::ZERO);
                    }
                    wake_from.push(i);
                    tally.push(
                        node,
                        NodeOutcome::Taken {
                            holder: bytes(&items[2]),
                            pttl_ms: pttl,
                        },
                    );
                }
                // A script that failed midway may have stored our token before it failed.
                Ok(Some(Err(e))) => {
                    failed_midway.push(i);
                    tally.fail(node, e)
                }
                Err(e) => tally.fail(node, e),
                other => tally.push(
                    node,
                    NodeOutcome::Error(format!("unexpected reply {other:?}")),
                ),
            }
        }

        if granted.len() >= inner.quorum
            && let Some(fence) = self.settle_fence(plan, &granted)
        {
            let ttl = self.grant_ttl();
            let valid_until = t0 + ttl.saturating_sub(drift(ttl));
            if Instant::now() < valid_until {
                let shared = Arc::new(GuardShared::new(
                    Arc::clone(inner),
                    Arc::clone(keys),
                    round.token.clone(),
                    fence,
                    opts.clone(),
                    plan.node_timeout,
                    t0,
                    valid_until,
                ));
                let next = shared.next_check(t0);
                inner.renewer.schedule(next, &shared);
                return Ok(Attempt::Held(MutexGuard { shared }));
            }
        }

        // Not held: undo every grant, and on nodes whose script failed midway. Nodes that did
        // not answer in time already have the undo queued behind our request; nodes that said
        // "taken" never stored our token.
        if !granted.is_empty() || !failed_midway.is_empty() {
            let mut calls: Vec<&[Call]> = vec![&[]; n];
            for i in granted.iter().map(|(i, _)| *i).chain(failed_midway) {
                calls[i] = std::slice::from_ref(undo);
            }
            quorum::exchange(nodes, &calls, Instant::now() + plan.node_timeout, None);
        }
        let answered = tally.yes + tally.refused;
        if answered >= inner.quorum {
            // A split vote or a late grant: nobody may hold it right now, so do not wait for
            // the holder's whole TTL.
            if wake_from.is_empty() || granted.len() >= inner.quorum {
                hint = Some(Duration::ZERO);
            }
            Ok(Attempt::Busy { hint, wake_from })
        } else {
            Ok(Attempt::Unreachable(Error::from_report(
                "fewer than a quorum of nodes answered",
                ErrorKind::NoQuorum,
                tally.reports,
                tally.source,
            )))
        }
    }

    /// The lease of a grant: the TTL, shortened so it ends with `max_hold`.
    fn grant_ttl(&self) -> Duration {
        match self.opts.max_hold {
            Some(h) => self.opts.ttl.min(h.max(MIN_TTL)),
            None => self.opts.ttl,
        }
    }

    /// The fence of a grant, made monotonic across different quorums: the largest counter
    /// among the granting nodes, written back to those that returned less, so that any later
    /// quorum overlaps a node whose counter is already at least this fence. `None` when the
    /// write-back did not reach a quorum.
    fn settle_fence(&self, plan: &Plan, granted: &[(usize, u64)]) -> Option<u64> {
        if !self.opts.fencing {
            return Some(0);
        }
        let max = granted.iter().map(|(_, f)| *f).max().unwrap_or(0);
        let behind: Vec<usize> = granted
            .iter()
            .filter(|(_, f)| *f < max)
            .map(|(i, _)| *i)
            .collect();
        if behind.is_empty() {
            return Some(max);
        }
        let nodes = &self.client.inner.nodes;
        let mut calls: Vec<&[Call]> = vec![&[]; nodes.len()];
        let raise = Call::new(
            &scripts::FENCE_MAX,
            &[&plan.keys.fence],
            &[max.to_string().as_bytes()],
        );
        for i in &behind {
            calls[*i] = std::slice::from_ref(&raise);
        }
        let answers = quorum::exchange(nodes, &calls, Instant::now() + plan.node_timeout, None);
        let raised = behind
            .iter()
            .filter(|i| matches!(&answers[**i], Ok(v) if matches!(v.first(), Some(Ok(_)))))
            .count();
        let at_max = granted.len() - behind.len() + raised;
        (at_max >= self.client.inner.quorum).then_some(max)
    }

    /// Blocks until a release signal, or `block` passes. Falls back to a randomized sleep
    /// when no node can be waited on.
    ///
    /// With one node, the next attempt's requests are pipelined behind the `BLPOP`: Redis
    /// runs them the moment the wait ends, so a waiter learns of a release and takes the lock
    /// in one round trip. Their result is returned.
    fn wait_for_release(
        &self,
        plan: &Plan,
        wake_from: &[usize],
        block: Duration,
        will_wait: bool,
    ) -> Result<Option<Attempt>, Error> {
        if block.is_zero() {
            return Ok(None);
        }
        let nodes = &self.client.inner.nodes;
        let i = if wake_from.is_empty() {
            token::pick(nodes.len())
        } else {
            wake_from[token::pick(wake_from.len())]
        };
        let node = &nodes[i];
        let round = match nodes.len() {
            1 => Some(self.round(plan, true, will_wait)?),
            _ => None,
        };
        let started = Instant::now();
        let connected = started + plan.node_timeout;
        let conn = node
            .endpoint(key_slot(&plan.keys.wake), connected)
            .and_then(|e| e.take_or_connect(connected).map(|c| (e, c)));
        if let Ok((endpoint, mut conn)) = conn {
            // Redis checks blocking timeouts on its cron tick (every 100 ms at the default
            // hz 10), so a BLPOP may return up to a tick late. The wait must end on time (a
            // crashed holder's key expires exactly then), so our own read deadline ends it,
            // and a connection whose BLPOP is still pending is dropped, never reused. Long
            // waits ask the server for a tick less, so that they usually end cleanly.
            let tick = Duration::from_millis(100);
            let server_block = if block > tick + tick / 2 {
                block - tick
            } else {
                block
            };
            // BLPOP takes seconds with millisecond precision; 0 would mean "forever".
            let secs = format!("{:.3}", server_block.as_secs_f64().max(0.001));
            let mut packed = redis::cmd("BLPOP")
                .arg(plan.keys.wake.as_slice())
                .arg(secs)
                .get_packed_command();
            let calls: Vec<&Call> = round.iter().flat_map(|r| &r.calls).collect();
            for c in &calls {
                c.write_packed(&mut packed);
            }
            let t0 = Instant::now();
            let waited = node::set_timeouts(&conn, started + block + Duration::from_millis(2))
                .and_then(|()| conn.send_packed_command(&packed))
                .and_then(|()| conn.recv_response());
            match (waited, &round) {
                (Ok(_), None) => {
                    endpoint.put(conn);
                    return Ok(None);
                }
                (Ok(_), Some(round)) => {
                    let deadline = Instant::now() + plan.node_timeout + self.opts.replica_wait();
                    let answer = quorum::receive(&mut conn, &calls, false, deadline);
                    quorum::finish(&endpoint, conn, &answer, Some(&round.undo));
                    return self.settle(plan, round, t0, vec![answer]).map(Some);
                }
                (Err(e), round) => {
                    // The attempt still runs when the server ends the wait (or has run: a
                    // stop signal interrupts the read with EINTR): undo it behind.
                    let timed_out = e.is_timeout();
                    if let Some(round) = round {
                        quorum::finish(&endpoint, conn, &Err(e), Some(&round.undo));
                    }
                    if timed_out {
                        return Ok(None);
                    }
                }
            }
        }
        let left = block.saturating_sub(started.elapsed());
        std::thread::sleep(token::jitter(self.opts.retry_delay).min(left));
        Ok(None)
    }
}
