//! The blocking driver of an acquisition: it runs the I/O-free machines of `proto/` (the
//! rounds and the call across them) over the transport, with the real clocks and the OS
//! random generator. Waiting for a release is in `wait.rs`.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::cleanup::Cleanup;
use super::keys::Keys;
use super::lease::Lease;
use super::proto::acquisition::Then;
use super::proto::call::{AcquireCall, Verdict, Withdraw};
use super::proto::round::{Refused, Requests};
use super::proto::{Kind, Spec};
use super::renew::Renewable;
use super::room::Turn;
use super::scripts::{Call, only_to};
use super::token;
use super::voters::Voters;
use crate::error::{Error, ErrorKind, TryLockError};
use crate::net::{self, Enough, key_slot};
use crate::options::{MAX_PERMITS, MutexOptions, default_node_timeout};
use crate::process;

/// One acquisition attempt's result.
pub(super) enum Attempt {
    Held(Arc<Lease>),
    /// Not taken: what the call does next.
    Refused(Then),
}

/// How a wait for a release ended.
pub(super) enum WaitEnd {
    /// The round behind it was answered: its attempt.
    Attempt(Attempt),
    /// A release signal came (`woken`), or the wait's time ran out, or it was ended early:
    /// the call goes on with a round.
    Ended { woken: bool },
    /// Its connection broke (or the node could not be waited on), with this much of the wait
    /// left: the call pauses (see `Acquisition::pause_after_broken_wait`).
    Broken { left: Duration },
}

/// One call on a lock (an acquisition, a status query), with its arguments checked once.
pub(crate) struct Plan {
    pub(super) voters: Arc<Voters>,
    pub(super) spec: Spec,
}

impl Plan {
    /// Checks the name and the options; nothing is sent.
    pub(crate) fn new(
        voters: &Arc<Voters>,
        keys: &Arc<super::Keys>,
        opts: &MutexOptions,
    ) -> Result<Plan, Error> {
        let node_timeout = opts
            .node_timeout
            .or(voters.node_timeout)
            .unwrap_or_else(|| default_node_timeout(opts.ttl));
        let mut spec = Spec::new(
            Arc::clone(keys),
            opts.clone(),
            node_timeout,
            voters.nodes.len(),
        )?;
        spec.announce = voters.nodes.iter().any(|n| n.as_cluster().is_some());
        Ok(Plan {
            voters: Arc::clone(voters),
            spec,
        })
    }

    /// Takes the lock, waiting until `deadline` (forever with `None`); `interrupted` is asked
    /// after every wake-up whether to give up.
    pub(crate) fn acquire(
        &self,
        deadline: Option<Instant>,
        interrupted: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Arc<Lease>, TryLockError> {
        let begun = Instant::now();
        let counters = &self.voters.counters;
        let may_wait = deadline.is_none_or(|d| d > begun);
        let _waiting = may_wait.then(|| counters.waiting());
        let mut call = AcquireCall::new(
            &self.spec,
            deadline.map(|d| d.saturating_duration_since(begun)),
            self.voters.connect_timeout,
        );
        // An interrupt check that only a wait's end runs keeps the waits short (with a wake-up
        // descriptor, a signal ends the wait itself).
        if interrupted.is_some() && !net::has_wake_fd() {
            call.keep_waits_short();
        }
        // A wake-up the call was given and made no round after (it was interrupted first):
        // from which node.
        let mut unused = None;
        let taken = self.take(&mut call, (begun, deadline), interrupted, &mut unused);
        if call.has_waited() {
            self.forget_waits();
        }
        if taken.is_err()
            && let Some(id) = call.withdraw_on_giving_up()
        {
            self.withdraw(id, unused);
        }
        counters.acquisition(
            (self.spec.kind, &self.spec.keys.lock),
            &taken,
            may_wait,
            call.has_waited(),
            begun.elapsed(),
        );
        taken
    }

    /// The loop of [`acquire`](Self::acquire): it ferries between the call's machine and the
    /// transport. Of the client's threads that wait for this lock, one waits on Redis; the
    /// others park in the client's room (see `room.rs`) until their turn. `unused` is left
    /// with the node of a wake-up that no round followed.
    fn take(
        &self,
        call: &mut AcquireCall,
        (begun, deadline): (Instant, Option<Instant>),
        mut interrupted: Option<&mut dyn FnMut() -> bool>,
        unused: &mut Option<usize>,
    ) -> Result<Arc<Lease>, TryLockError> {
        // One room per lock, whatever the kind of hold: a waiting writer keeps new readers
        // out anyway, and one reader's wake-up is passed on to the next.
        let mut place = self.voters.rooms.place(self.spec.keys.lock.clone());
        let woken = net::has_wake_fd().then_some(&net::woken_now as &dyn Fn() -> bool);
        // A call with an interrupt check looks at it as often parked as it does waiting.
        let look = interrupted.is_some().then_some(self.spec.opts.wait_cap);
        // An attempt already made while waiting for a release.
        let mut made: Option<Attempt> = None;
        // Parked, the call asks for its turn again before any round.
        let mut parked: Option<Then> = None;
        loop {
            // Not around `interrupted`: it may run user code (a Python signal handler), which
            // may fork.
            let scope = process::Scope::enter();
            let then = match (parked.take(), made.take()) {
                (Some(then), _) => then,
                (None, made) => {
                    // A round after a wake-up (or behind its wait) is what the wake-up was for.
                    *unused = None;
                    let attempt = match made {
                        Some(a) => a,
                        None => self.attempt(call, begun)?,
                    };
                    match attempt {
                        Attempt::Held(guard) => {
                            // The line is left inside the scope: one `getpid` for the call.
                            drop(place);
                            return Ok(guard);
                        }
                        Attempt::Refused(then) => then,
                    }
                }
            };
            match then {
                Then::Fail(e) => {
                    if !matches!(e, TryLockError::WouldBlock) {
                        place.free_all();
                    }
                    // The line is left inside the scope, which ends before the interrupt
                    // check (see above).
                    drop(place);
                    drop(scope);
                    // A round that a wake-up's check stopped (see `crate::wake_on_checked`)
                    // fails like one whose nodes timed out; the call was interrupted.
                    if net::stopped()
                        && let Some(check) = interrupted.as_mut()
                        && check()
                    {
                        return Err(interrupt(made.take()));
                    }
                    return Err(e);
                }
                Then::Again => {}
                Then::Pause(pause) => {
                    place.free_all();
                    net::sleep(pause)
                }
                Then::Wait {
                    node,
                    block,
                    will_wait,
                    behind,
                } => match place.turn(deadline, woken, look) {
                    Turn::Seated => match self.wait_for_release(
                        call,
                        begun,
                        node,
                        block,
                        (will_wait, behind),
                    )? {
                        WaitEnd::Attempt(attempt) => made = Some(attempt),
                        WaitEnd::Ended { woken } => {
                            call.wait_ended(woken);
                            *unused = woken.then_some(node);
                        }
                        WaitEnd::Broken { left } => {
                            net::sleep(call.pause_after_broken_wait(left, token::random()))
                        }
                    },
                    Turn::Go => call.wait_ended(false),
                    Turn::Look => parked = Some(then),
                },
            }
            drop(scope);
            if let Some(check) = interrupted.as_mut()
                && check()
            {
                return Err(interrupt(made.take()));
            }
        }
    }

    /// One Redlock round: ask every node at once, count the grants as they come, and stop
    /// reading once they decide the round (a quorum granted, or too few nodes are left to
    /// make one): the slower nodes' replies are read before their connections' next use.
    fn attempt(&self, call: &mut AcquireCall, begun: Instant) -> Result<Attempt, Error> {
        let nodes = &self.voters.nodes;
        // Before t0: opening a fresh client's first connections is not the lease's time.
        let slot = key_slot(&self.spec.keys.lock);
        net::warm_up(nodes, |_| Some(slot));
        let sent = self.begin(call, begun, None)?;
        let round = call.round();
        let mut refusal = Ok(());
        let answers = net::exchange_until(
            nodes,
            &vec![&sent.calls[..]; nodes.len()],
            Instant::now() + self.spec.node_timeout + self.spec.opts.replica_wait(),
            Some(&sent.undo),
            &mut |i, answer| {
                if refusal.is_ok() {
                    refusal = super::calls::refusal(&self.spec, std::slice::from_ref(answer));
                }
                round.answer(i, &*nodes[i], answer);
                match round.decided() && !round.all_answered() {
                    true => Enough::Yes {
                        undo: round.undo_behind_unread(),
                    },
                    false => Enough::No,
                }
            },
        );
        refusal?;
        let unread: Vec<usize> = (0..nodes.len()).filter(|&i| answers[i].is_none()).collect();
        Ok(self.settle(call, begun, &sent, &unread))
    }

    /// Begins the call's next round: a fresh token, the lease clock read just before it is
    /// sent. `will_wait`: as a wait said it, for a round sent behind that wait.
    pub(super) fn begin(
        &self,
        call: &mut AcquireCall,
        begun: Instant,
        will_wait: Option<bool>,
    ) -> Result<Requests, Error> {
        let token = token::new_token(self.voters.label())?;
        let t0 = self.voters.clock.now();
        Ok(call.begin(&self.spec, token, t0, begun.elapsed(), will_wait, None))
    }

    /// Ends the call's round whose answers are in: writes the fence back where the round
    /// says (until a quorum holds it), then either makes the lease or undoes what the round
    /// stored. `unread` are nodes whose answer was left to come (the round ended at its
    /// quorum).
    pub(super) fn settle(
        &self,
        call: &mut AcquireCall,
        begun: Instant,
        sent: &Requests,
        unread: &[usize],
    ) -> Attempt {
        let inner = &*self.voters;
        let nodes = &inner.nodes;
        let round = call.round();
        for &i in unread {
            round.left_unread(i, &*nodes[i]);
        }
        if let Some((raise, to)) = round.fence_raise(&self.spec) {
            let calls = only_to(nodes.len(), &to, &raise);
            let deadline = Instant::now() + self.spec.node_timeout;
            net::exchange_until(nodes, &calls, deadline, None, &mut |i, answer| {
                round.raised(i, answer, &self.spec);
                Enough::when(round.raise_decided())
            });
        }
        let now = inner.clock.read();
        match call.finish(now.stamp) {
            Verdict::Held { grant, withdraw } => {
                if let Some(Withdraw { id, nodes }) = withdraw {
                    let until = Instant::now() + self.spec.announce(true);
                    let withdraw = Cleanup::withdraw(&self.spec, &id, nodes, until);
                    inner.renewer.clean_up(withdraw);
                }
                let lease = Arc::new(Lease::new(
                    Arc::clone(&self.voters),
                    &self.spec,
                    grant,
                    &now,
                ));
                let next = lease.next_check(&now);
                let weak: Weak<dyn Renewable> = Arc::downgrade(&lease) as Weak<Lease>;
                inner.renewer.schedule(next, weak, 0);
                Attempt::Held(lease)
            }
            Verdict::Refused { refused, next } => {
                self.undo(&refused, sent.undo.call());
                Attempt::Refused(call.after(next, begun.elapsed(), token::random()))
            }
        }
    }

    /// Undoes what a refused round may have stored: now where it is known, in the background
    /// where the connection broke, and where the undo sent now failed (its connection broke
    /// or the node did not answer in time: the grant may still be there).
    #[cold]
    pub(super) fn undo(&self, refused: &Refused, undo: &Call) {
        let inner = &*self.voters;
        let until = inner.clock.instant_of(refused.clean_until);
        let later = |nodes: Vec<usize>| {
            if !nodes.is_empty() {
                let cleanup = Cleanup::new(&self.spec, &refused.token, nodes, until);
                inner.renewer.clean_up(cleanup);
            }
        };
        later(refused.clean_up.clone());
        if !refused.undo_on.is_empty() {
            let nodes = &inner.nodes;
            let calls = only_to(nodes.len(), &refused.undo_on, undo);
            let deadline = Instant::now() + self.spec.node_timeout;
            let answers = net::exchange(nodes, &calls, deadline, None);
            later(
                refused
                    .undo_on
                    .iter()
                    .copied()
                    .filter(|&i| answers[i].is_err())
                    .collect(),
            );
        }
    }
}

/// The end of a wait that was interrupted: the attempt behind the last wait may have taken the
/// lock; it is given back, or it would stay held (and unrenewed) for a whole TTL with nobody
/// holding it.
#[cold]
fn interrupt(made: Option<Attempt>) -> TryLockError {
    if let Some(Attempt::Held(lease)) = made
        && let Err(e) = lease.release()
    {
        log::warn!("redmutex: releasing a lock taken as its wait was interrupted: {e}");
    }
    Error::new(ErrorKind::Interrupted, "the wait was interrupted").into()
}

impl Plan {
    /// A call on a lock of another kind than the mutex, with its arguments checked; nothing
    /// is sent.
    pub(crate) fn for_kind(
        voters: &Arc<Voters>,
        keys: &Arc<Keys>,
        opts: &MutexOptions,
        kind: Kind,
    ) -> Result<Plan, Error> {
        if let Kind::Semaphore(permits) = kind {
            if permits == 0 || permits > MAX_PERMITS {
                return Err(Error::invalid(format!(
                    "a semaphore must have 1 to {MAX_PERMITS} permits, got {permits}"
                )));
            }
            if voters.nodes.len() > 1 {
                return Err(Error::invalid(format!(
                    "a semaphore needs one voter (one node, Sentinel or a Cluster), not {} \
                     independent masters: majorities granting different permits need not \
                     share a node, so N permits could admit up to 2N-1 holders",
                    voters.nodes.len()
                )));
            }
        }
        let mut plan = Plan::new(voters, keys, opts)?;
        plan.spec.kind = kind;
        Ok(plan)
    }
}
