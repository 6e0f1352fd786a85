//! The acquire loop: Redlock rounds, the validity, the fence write-back, and riding over a
//! short outage. Waiting for a release is in `wait.rs`.

use std::cell::OnceCell;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use redis::Value;

use super::cleanup::Cleanup;
use super::clock::Stamp;
use super::keys::Keys;
use super::lease::Lease;
use super::renew::Renewable;
use super::reply::{bytes, int};
use super::scripts::{self, Call, millis, release_call};
use super::tally::{Tally, replicas_outcome};
use super::token;
use super::voters::Voters;
use crate::error::{Error, ErrorKind, NodeOutcome, TryLockError};
use crate::net::{self, Answer, Failure, key_slot};
use crate::options::{MAX_NAME_LEN, MIN_TTL, MutexOptions, default_node_timeout, drift};

/// One acquisition attempt's result.
pub(super) enum Attempt {
    Held(Arc<Lease>),
    /// Someone else holds it (or a split vote): wait, preferably on one of these nodes.
    Busy {
        hint: Option<Duration>,
        wake_from: Vec<usize>,
    },
    /// Fewer than a quorum of nodes answered.
    Unreachable(Error),
}

/// The requests of one acquisition round.
pub(super) struct Round {
    token: Vec<u8>,
    /// Sent to every node: the acquire script, then any `WAIT`.
    pub(super) calls: Vec<Call>,
    /// Releases this round's token: for grants the round does not keep.
    pub(super) undo: Call,
}

/// One call on a lock (an acquisition, a status query), with its arguments checked once.
pub(crate) struct Plan {
    pub(super) voters: Arc<Voters>,
    pub(super) keys: Arc<Keys>,
    pub(super) opts: MutexOptions,
    pub(super) node_timeout: Duration,
    label: String,
    /// The id this call announces itself by while it waits.
    waiter: OnceCell<Vec<u8>>,
}

impl Round {
    /// The round's token.
    pub(super) fn token(&self) -> &[u8] {
        &self.token
    }
}

impl Plan {
    /// Checks the name and the options; nothing is sent.
    pub(crate) fn new(
        voters: &Arc<Voters>,
        keys: &Arc<Keys>,
        opts: &MutexOptions,
    ) -> Result<Plan, Error> {
        let name = &keys.lock;
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(Error::invalid(format!(
                "a lock name must be 1 to {MAX_NAME_LEN} bytes, got {}",
                name.len()
            )));
        }
        opts.validate()?;
        let node_timeout = opts
            .node_timeout
            .or(voters.node_timeout)
            .unwrap_or_else(|| default_node_timeout(opts.ttl));
        Ok(Plan {
            voters: Arc::clone(voters),
            keys: Arc::clone(keys),
            opts: opts.clone(),
            node_timeout,
            label: voters.label(),
            waiter: OnceCell::new(),
        })
    }

    /// Takes the lock, waiting until `deadline` (forever with `None`); `interrupted` is asked
    /// after every wake-up whether to give up.
    pub(crate) fn acquire(
        &self,
        deadline: Option<Instant>,
        mut interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Arc<Lease>, TryLockError> {
        let mut waited = false;
        let mut unreachable_since: Option<Instant> = None;
        // An attempt already made while waiting for a release.
        let mut made: Option<Attempt> = None;
        loop {
            let started = Instant::now();
            let will_wait = deadline.is_none_or(|d| d > started);
            let attempt = match made.take() {
                Some(a) => a,
                None => self.attempt(waited, will_wait)?,
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
                    made = self.wait_for_release(&wake_from, block, will_wait)?;
                    waited = true;
                }
                Attempt::Unreachable(err) => {
                    if err.is_misconfiguration() {
                        return Err(err.into());
                    }
                    // Ride over a short outage (a restart, a failover) for up to the connect
                    // timeout, then report it rather than block forever on a dead Redis.
                    let since = *unreachable_since.get_or_insert(started);
                    let give_up = since + self.voters.connect_timeout;
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
                // The attempt behind the last wait may have taken the lock: give it back, or
                // it would stay held (and unrenewed) for a whole TTL with nobody holding it.
                if let Some(Attempt::Held(lease)) = made.take()
                    && let Err(e) = lease.release()
                {
                    log::warn!("redmutex: releasing a lock taken as its wait was interrupted: {e}");
                }
                return Err(Error::new(ErrorKind::Interrupted, "the wait was interrupted").into());
            }
        }
    }

    /// One Redlock round: ask every node at once, count the grants, check the validity.
    fn attempt(&self, waited: bool, will_wait: bool) -> Result<Attempt, Error> {
        let nodes = &self.voters.nodes;
        let round = self.round(waited, will_wait)?;
        // Before t0: opening a fresh client's first connections is not the lease's time.
        let slot = key_slot(&self.keys.lock);
        net::warm_up(nodes, |_| Some(slot));
        let t0 = self.voters.clock.now();
        let answers = net::exchange(
            nodes,
            &vec![&round.calls[..]; nodes.len()],
            Instant::now() + self.node_timeout + self.opts.replica_wait(),
            Some(&round.undo),
        );
        self.settle(&round, t0, answers)
    }

    /// The requests of one round: a new token, the acquire script (and, with min_replicas,
    /// a `WAIT` after it on the same connection, so it waits for exactly that write), and
    /// the undo that releases a grant the round does not keep.
    pub(super) fn round(&self, waited: bool, will_wait: bool) -> Result<Round, Error> {
        let opts = &self.opts;
        let keys = &self.keys;
        let token = token::new_token(&self.label)?;
        let announce = if will_wait {
            opts.wait_cap + self.node_timeout + Duration::from_millis(10)
        } else {
            Duration::ZERO
        };
        let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
        // This call's announcements all go by the token of its first round that announced.
        let waiter: &[u8] = if will_wait || waited {
            self.waiter.get_or_init(|| token.clone())
        } else {
            b""
        };
        let acquire = Call::new(
            &scripts::ACQUIRE,
            &[&keys.lock, &keys.fence, &keys.waiters, &keys.handoff],
            &[
                &token,
                &millis(self.grant_ttl()),
                flag(opts.fencing),
                flag(waited),
                &millis(announce),
                waiter,
            ],
        );
        let undo = release_call(keys, &token, opts, false);
        let mut calls = vec![acquire];
        if let Some((replicas, timeout)) = opts.min_replicas {
            calls.push(Call::wait(replicas, timeout));
        }
        Ok(Round { token, calls, undo })
    }

    /// Counts a round's answers (sent at `t0`, on the lease clock): a guard when a quorum
    /// granted within the validity; otherwise every grant is undone and the caller learns
    /// whether to wait.
    pub(super) fn settle(
        &self,
        round: &Round,
        t0: Stamp,
        answers: Vec<Answer>,
    ) -> Result<Attempt, Error> {
        let inner = &*self.voters;
        let nodes = &inner.nodes;
        let n = nodes.len();
        let opts = &self.opts;
        let keys = &self.keys;
        let undo = &round.undo;
        let mut tally = Tally::default();
        let mut granted: Vec<(usize, u64)> = Vec::new();
        let mut hint: Option<Duration> = None;
        let mut wake_from = Vec::new();
        let mut failed_midway = Vec::new();
        let mut unanswered = Vec::new();
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
                        Some((wanted, _)) => replicas_outcome(waited.as_ref(), wanted),
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
                Err(e) => {
                    // The undo queued behind the request could not be written: the
                    // connection broke after the request may have reached the server.
                    if e.followup_lost() || e.failure() == Failure::Dropped {
                        unanswered.push(i);
                    }
                    tally.fail(node, e)
                }
                other => tally.push(
                    node,
                    NodeOutcome::Error(format!("unexpected reply {other:?}")),
                ),
            }
        }

        if granted.len() >= inner.quorum
            && let Some(fence) = self.settle_fence(&granted)
        {
            let ttl = self.grant_ttl();
            let valid_until = t0 + ttl.saturating_sub(drift(ttl));
            if inner.clock.now() < valid_until {
                let lease = Arc::new(Lease::new(
                    Arc::clone(&self.voters),
                    Arc::clone(keys),
                    round.token.clone(),
                    fence,
                    opts.clone(),
                    self.node_timeout,
                    t0,
                    valid_until,
                ));
                let next = lease.next_check(t0);
                let weak: Weak<dyn Renewable> = Arc::downgrade(&lease) as Weak<Lease>;
                inner.renewer.schedule(next, weak, 0);
                return Ok(Attempt::Held(lease));
            }
        }

        // Not held: undo every grant, and on nodes whose script failed midway. Nodes that did
        // not answer in time have the undo queued behind our request, unless their connection
        // broke: they get it again on a fresh connection, in the background. Nodes that said
        // "taken" never stored our token.
        if !unanswered.is_empty() {
            let until = inner.clock.instant_of(t0 + self.grant_ttl());
            let cleanup = Cleanup::new(
                keys,
                &round.token,
                opts,
                self.node_timeout,
                unanswered,
                until,
            );
            inner.renewer.clean_up(cleanup);
        }
        if !granted.is_empty() || !failed_midway.is_empty() {
            let mut calls: Vec<&[Call]> = vec![&[]; n];
            for i in granted.iter().map(|(i, _)| *i).chain(failed_midway) {
                calls[i] = std::slice::from_ref(undo);
            }
            net::exchange(nodes, &calls, Instant::now() + self.node_timeout, None);
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
            Ok(Attempt::Unreachable(tally.into_error(
                "fewer than a quorum of nodes answered",
                ErrorKind::NoQuorum,
            )))
        }
    }

    /// The lease of a grant: the TTL, shortened so it ends with `max_hold`.
    pub(super) fn grant_ttl(&self) -> Duration {
        match self.opts.max_hold {
            Some(h) => self.opts.ttl.min(h.max(MIN_TTL)),
            None => self.opts.ttl,
        }
    }

    /// The fence of a grant, made monotonic across different quorums: the largest counter
    /// among the granting nodes, written back to those that returned less, so that any later
    /// quorum overlaps a node whose counter is already at least this fence. `None` when the
    /// write-back did not reach a quorum.
    fn settle_fence(&self, granted: &[(usize, u64)]) -> Option<u64> {
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
        let nodes = &self.voters.nodes;
        let mut calls: Vec<&[Call]> = vec![&[]; nodes.len()];
        let raise = Call::new(
            &scripts::FENCE_MAX,
            &[&self.keys.fence],
            &[max.to_string().as_bytes()],
        );
        for i in &behind {
            calls[*i] = std::slice::from_ref(&raise);
        }
        let answers = net::exchange(nodes, &calls, Instant::now() + self.node_timeout, None);
        let raised = behind
            .iter()
            .filter(|i| matches!(&answers[**i], Ok(v) if matches!(v.first(), Some(Ok(_)))))
            .count();
        let at_max = granted.len() - behind.len() + raised;
        (at_max >= self.voters.quorum).then_some(max)
    }
}
