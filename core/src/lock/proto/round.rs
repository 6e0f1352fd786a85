//! One acquisition round as a state machine: the requests it sends to every node, each
//! node's answer as it comes in, the fence write-back, and the verdict on the lease clock's
//! reading that the driver hands in. It reads no clock, draws no random number and touches
//! no socket.

use std::time::Duration;

use super::fence::Raise;
use super::plain;
use super::spec::Spec;
use super::undo::Undo;
use super::vote::Vote;
use crate::error::{Error, ErrorKind, NodeOutcome};
use crate::lock::calls;
use crate::lock::clock::Stamp;
use crate::lock::scripts::{self, Call, millis};
use crate::lock::tally::{Seat, Tally, replicas_outcome, unexpected};
use crate::options::drift;
use crate::wire::{Answer, Failure};

/// One round: the acquire script on every node (or an unfenced `try_lock`'s plain commands, see
/// `proto/plain.rs`), counted as the answers arrive.
pub struct AcquireRound {
    token: Vec<u8>,
    /// Whether the round asks with [`plain`] commands rather than a script.
    plain: bool,
    /// On the lease clock, read before the first request left: every grant's expiry on a
    /// server starts after it.
    t0: Stamp,
    ttl: Duration,
    quorum: usize,
    fencing: bool,
    min_replicas: Option<u32>,
    tally: Tally,
    /// The node of each of the tally's reports, in the order the answers came.
    reported: Vec<usize>,
    answered: Vec<bool>,
    /// Nodes that granted, with the fence counter each returned.
    granted: Vec<(usize, u64)>,
    /// The shortest remaining TTL among the nodes that said "taken".
    hint: Option<Duration>,
    /// Nodes that said "taken": a release there wakes a waiter.
    wake_from: Vec<usize>,
    /// Nodes that may hold the round's token without granting it: their script or command
    /// failed midway, they granted without enough replicas, or a plain acquire's `SET` won
    /// against read holds.
    failed_midway: Vec<usize>,
    /// Nodes whose connection broke after the request may have reached them, so that the
    /// undo queued behind it could not follow.
    unanswered: Vec<usize>,
    /// Nodes whose answer was a transport error (no connection, a broken one, no reply in
    /// time): the fence write-back does not wait on them.
    unreachable: Vec<usize>,
    /// The fence write-back, once sent.
    raising: Option<Raise>,
    /// Whether a grant takes the caller's announcement back (a round that has waited).
    takes_back: bool,
    /// Nodes whose answers the round did not wait for: it was decided without them.
    unread: Vec<usize>,
}

/// What a round sends: made with the round, and kept by its driver while the round counts
/// the answers.
pub struct Requests {
    /// Sent to every node: the acquire script, then any `WAIT`.
    pub calls: Vec<Call>,
    /// Releases the round's token: for grants the round does not keep, queued behind the
    /// requests of a node that does not answer in time so that a late grant is undone in
    /// order.
    pub undo: Undo,
}

/// A round that a quorum granted within the validity: the lease.
pub struct Grant {
    /// The round's token.
    pub token: Vec<u8>,
    /// The fence (0 when the lock does not fence).
    pub fence: u64,
    /// The lease clock's reading when the round was sent.
    pub t0: Stamp,
    /// When the validity ends.
    pub valid_until: Stamp,
    /// Where the call takes its waiter announcement back, in the background (off the
    /// caller's path: some of these nodes may not have answered yet): the nodes that did not
    /// grant (they refused, failed, or had not answered when the round was decided), where
    /// this round may have announced the call; and, when an earlier round of the call
    /// announced it (one that could not reach a quorum, say, before the lock was free at
    /// once), also the nodes that granted without taking it back (a round that had not
    /// waited: only a waited round's grant takes it back). Otherwise a release would keep the
    /// lock for a waiter that is gone.
    pub withdraw_on: Vec<usize>,
}

/// A round that did not take the lock.
pub struct Refused {
    /// The round's token.
    pub token: Vec<u8>,
    /// Nodes to send the round's undo to now: they granted, or their script failed midway.
    pub undo_on: Vec<usize>,
    /// Nodes to clean up in the background, on fresh connections (see
    /// [`AcquireRound::answer`]), until the lease clock reads `clean_until`.
    pub clean_up: Vec<usize>,
    /// See `clean_up`.
    pub clean_until: Stamp,
    /// Every node answered, and refused: each one ran the round's announcement, if it had
    /// one, and holds nothing of it to undo.
    pub refused_everywhere: bool,
}

/// What the caller of a refused round should do.
pub enum Next {
    /// Someone else holds it (or a split vote): wait, at most `hint`, preferably on one of
    /// `wake_from`.
    Busy {
        /// How long to wait at most.
        hint: Option<Duration>,
        /// The nodes a wake-up signal may come from.
        wake_from: Vec<usize>,
    },
    /// Fewer than a quorum of nodes answered.
    Unreachable(Error),
}

impl AcquireRound {
    /// A round with `token`, its clock read at `t0`. `waited` says whether this call has
    /// waited for a release (only such callers may take a lock that is being handed off), and
    /// whether its last wait was woken by a wake-up signal (see `Acquisition::wait_ended`);
    /// `announce` how long to announce this call as a waiter (zero: it will not wait, or its
    /// standing announcement suffices), and how long the undo of a round that a quorum did not
    /// grant announces it again (a waited grant took the announcement back), by the id
    /// `waiter`. Returns the round and what it sends.
    pub fn new(
        spec: &Spec,
        token: Vec<u8>,
        t0: Stamp,
        (waited, woken): (bool, bool),
        (announce, again): (Duration, Duration),
        waiter: &[u8],
    ) -> (AcquireRound, Requests) {
        let (opts, keys) = (&spec.opts, &spec.keys);
        let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
        let ttl = spec.grant_ttl();
        let waits = waited || !announce.is_zero();
        // Other kinds of lease (a semaphore's permit, a read lock) take their own scripts.
        let other_kind = calls::acquire_call(spec, &token, (waited, woken), announce, waiter);
        // A fenced lock keeps the script: its counter moves only on a grant.
        let plain = other_kind.is_none() && !waits && !opts.fencing;
        // A waited round's grant takes its announcement back (the acquire script); a round
        // that a quorum did not grant puts it back with the undo, where the caller waits on.
        let rejoin =
            (other_kind.is_none() && waited && !again.is_zero()).then(|| (again, waiter.to_vec()));
        let mut calls = match other_kind {
            Some(call) => vec![call],
            // An unfenced lock's caller that has not waited and will not wait: plain commands.
            None if plain => plain::calls(spec, &token, ttl),
            None => {
                let (ttl_ms, fencing) = (millis(ttl), flag(opts.fencing));
                let call = if waits {
                    let announce_ms = millis(announce);
                    let args: [&[u8]; 6] =
                        [&token, &ttl_ms, fencing, flag(waited), &announce_ms, waiter];
                    Call::with_keys(&scripts::ACQUIRE, keys.acquire_keys(), &args)
                } else {
                    // Neither the waiters key nor the waiter's arguments: each key and
                    // argument costs the server its share of building the script's tables.
                    let args: [&[u8]; 3] = [&token, &ttl_ms, fencing];
                    Call::with_keys(&scripts::ACQUIRE, keys.try_acquire_keys(), &args)
                };
                vec![call]
            }
        };
        let undo = Undo::new(spec, &token, rejoin);
        if let Some((replicas, timeout)) = opts.min_replicas {
            calls.push(Call::wait(replicas, timeout));
        }
        let round = AcquireRound {
            token,
            plain,
            t0,
            ttl,
            quorum: spec.quorum,
            fencing: opts.fencing,
            min_replicas: opts.min_replicas.map(|(n, _)| n),
            tally: Tally::default(),
            reported: Vec::new(),
            answered: vec![false; spec.n],
            granted: Vec::new(),
            hint: None,
            wake_from: Vec::new(),
            failed_midway: Vec::new(),
            unanswered: Vec::new(),
            unreachable: Vec::new(),
            raising: None,
            takes_back: waited,
            unread: Vec::new(),
        };
        (round, Requests { calls, undo })
    }

    /// The round's token.
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    /// Until when a clean-up of this round's token is worth sending (its grants have expired
    /// by themselves then): for a round whose requests went out behind a wait that broke, and
    /// may have run with no undo able to follow.
    pub(crate) fn clean_until(&self) -> Stamp {
        self.t0 + self.ttl
    }

    /// Notes that node `i`'s answer was left unread: the round was decided without it. A
    /// round decided without a grant reports it as not waited for; a granted one leaves it
    /// unanswered (its fence write-back and its late grant go there), and undoes it when the
    /// grant is refused later (by its fence or its validity).
    pub fn left_unread(&mut self, i: usize, seat: &dyn Seat) {
        if self.answered[i] || self.unread.contains(&i) {
            return;
        }
        self.unread.push(i);
        if !self.granted() {
            self.answered[i] = true;
            self.reported.push(i);
            self.tally.not_waited_for(seat);
        }
    }

    /// Whether the undo goes behind the requests of the nodes a decided round leaves unread,
    /// on the same connection, so that a late grant there is undone as it runs: when no quorum
    /// granted. (A granted round sends it later, if its verdict refuses: see
    /// [`left_unread`](Self::left_unread).)
    pub fn undo_behind_unread(&self) -> bool {
        !self.granted()
    }

    /// Counts node `i`'s answer (`seat` names it). A second answer from one node is ignored.
    pub fn answer(&mut self, i: usize, seat: &dyn Seat, answer: &Answer) {
        if std::mem::replace(&mut self.answered[i], true) {
            return;
        }
        self.reported.push(i);
        let replies = match answer {
            Ok(replies) => replies,
            Err(e) => {
                // The undo queued behind the request could not be written: the connection
                // broke after the request may have reached the server.
                if e.followup_lost() || e.failure() == Failure::Dropped {
                    self.unanswered.push(i);
                }
                self.unreachable.push(i);
                self.tally.fail(seat, e.clone());
                return;
            }
        };
        // The acquire's replies, and the `WAIT`'s behind them when one was sent.
        let (replies, waited) = match (self.min_replicas, replies.split_last()) {
            (Some(_), Some((waited, replies))) => (replies, Some(waited)),
            _ => (&replies[..], None),
        };
        let vote = match (self.plain, replies) {
            (true, replies) => plain::vote(replies, &self.token),
            (false, [reply]) => Vote::of_script(reply),
            (false, other) => Vote::Unexpected(other),
        };
        let tally = &mut self.tally;
        match vote {
            Vote::Granted(fence) => {
                let outcome = match self.min_replicas {
                    Some(wanted) => replicas_outcome(waited, wanted),
                    None => NodeOutcome::Ok,
                };
                if outcome == NodeOutcome::Ok {
                    self.granted.push((i, fence));
                } else {
                    // The node granted, but too few replicas have it: undo it there.
                    self.failed_midway.push(i);
                }
                tally.push(seat, outcome);
            }
            Vote::Taken {
                holder,
                pttl_ms,
                stored,
            } => {
                if pttl_ms >= 0 {
                    let d = Duration::from_millis(pttl_ms as u64);
                    self.hint = Some(self.hint.map_or(d, |h| h.min(d)));
                } else if pttl_ms == -2 {
                    self.hint = Some(Duration::ZERO);
                }
                if stored {
                    self.failed_midway.push(i);
                }
                self.wake_from.push(i);
                tally.push(seat, NodeOutcome::Taken { holder, pttl_ms });
            }
            // A command that failed midway may have stored our token before it failed.
            Vote::Failed(e) => {
                self.failed_midway.push(i);
                tally.fail(seat, e.clone())
            }
            Vote::Unexpected(replies) => {
                let values: Vec<&redis::Value> =
                    replies.iter().filter_map(|r| r.as_ref().ok()).collect();
                tally.push(seat, unexpected("reply", &values))
            }
        }
    }

    /// Whether the answers so far decide the round and what its caller sees: a quorum
    /// granted; or too few nodes are left to make one, and it is settled whether a quorum
    /// answered (the lock is busy) or cannot (too few nodes answered).
    pub fn decided(&self) -> bool {
        let pending = self.answered.iter().filter(|a| !**a).count();
        let answered = self.tally.yes + self.tally.refused;
        self.granted()
            || (self.granted.len() + pending < self.quorum
                && (answered >= self.quorum || answered + pending < self.quorum))
    }

    /// Whether every node answered.
    pub(crate) fn all_answered(&self) -> bool {
        self.answered.iter().all(|a| *a)
    }

    /// Whether a quorum granted (the verdict may still refuse: the fence write-back or the
    /// validity).
    pub(crate) fn granted(&self) -> bool {
        self.granted.len() >= self.quorum
    }

    /// The fence write-back that a quorum's grant needs before it counts, and the nodes to
    /// send it to (see [`Raise`]); `None` when nothing is to be written.
    pub fn fence_raise(&mut self, spec: &Spec) -> Option<(Call, Vec<usize>)> {
        if !self.fencing || self.granted.len() < self.quorum {
            return None;
        }
        let (raise, to) = Raise::new(
            &self.granted,
            self.answered.len(),
            &self.unreachable,
            self.quorum,
        )?;
        let call = raise.call(spec, &self.token);
        self.raising = Some(raise);
        Some((call, to))
    }

    /// Counts node `i`'s answer to the fence write-back (see [`Raise::confirms`]).
    pub fn raised(&mut self, i: usize, answer: &Answer, spec: &Spec) {
        let reply = match answer {
            Ok(values) => values.first().and_then(|v| v.as_ref().ok()),
            Err(_) => None,
        };
        if let Some(raise) = &mut self.raising {
            raise.answer(i, Raise::confirms(reply, spec.controls));
        }
    }

    /// Whether the write-back's answers so far decide it (see [`Raise::decided`]).
    pub fn raise_decided(&self) -> bool {
        self.raising.as_ref().is_none_or(Raise::decided)
    }

    /// The verdict, on the lease clock's reading `now`: the lease when a quorum granted, its
    /// fence reached a quorum, and the validity has not run out by now; otherwise what to
    /// undo and what to do next. `announced`: whether an earlier round of the call announced
    /// it as a waiter (see [`Grant::withdraw_on`]).
    pub(crate) fn finish(
        mut self,
        now: Stamp,
        announced: bool,
    ) -> Result<Grant, (Box<Refused>, Next)> {
        // Reports in node order, whatever order the answers came in.
        if !self.reported.is_sorted() {
            let mut order: Vec<(usize, _)> = self
                .reported
                .drain(..)
                .zip(self.tally.reports.drain(..))
                .collect();
            order.sort_by_key(|(i, _)| *i);
            self.tally.reports = order.into_iter().map(|(_, r)| r).collect();
        }
        let fence = match &self.raising {
            _ if !self.fencing => Some(0),
            None => self.granted.iter().map(|(_, f)| *f).max(),
            Some(raise) => raise.fence(),
        };
        let valid_until = self.t0 + self.ttl.saturating_sub(drift(self.ttl));
        if self.granted.len() >= self.quorum
            && let Some(fence) = fence
            && now < valid_until
        {
            return Ok(Grant {
                token: self.token,
                fence,
                t0: self.t0,
                valid_until,
                withdraw_on: (0..self.answered.len())
                    .filter(|i| {
                        let granted = self.granted.iter().any(|(g, _)| g == i);
                        !granted || (announced && !self.takes_back)
                    })
                    .collect(),
            });
        }
        Err(self.refuse())
    }

    /// The verdict of a round that did not take the lock: what to undo, and what next.
    #[cold]
    #[inline(never)]
    fn refuse(self) -> (Box<Refused>, Next) {
        let clean_until = self.clean_until();
        // Not held: undo every grant, and on nodes whose script failed midway. Nodes that did
        // not answer in time have the undo queued behind our request, unless their connection
        // broke: they get it again on a fresh connection, in the background. Nodes that said
        // "taken" never stored our token.
        // A round that looked granted queued no undo behind the requests it left unread: a
        // late grant there would stay, so they get it now too.
        let unread_without_undo = match self.granted.len() >= self.quorum {
            true => &self.unread[..],
            false => &[],
        };
        let undo_on = self
            .granted
            .iter()
            .map(|(i, _)| *i)
            .chain(self.failed_midway.iter().copied())
            .chain(unread_without_undo.iter().copied())
            .collect();
        let answered = self.tally.yes + self.tally.refused;
        let refused_everywhere = self.tally.refused == self.answered.len();
        let next = if answered >= self.quorum {
            // A split vote or a late grant: nobody may hold it right now, so do not wait for
            // the holder's whole TTL.
            let hint = if self.wake_from.is_empty() || self.granted.len() >= self.quorum {
                Some(Duration::ZERO)
            } else {
                self.hint
            };
            Next::Busy {
                hint,
                wake_from: self.wake_from,
            }
        } else {
            Next::Unreachable(
                self.tally
                    .into_error("fewer than a quorum of nodes answered", ErrorKind::NoQuorum),
            )
        };
        let refused = Refused {
            clean_until,
            token: self.token,
            undo_on,
            clean_up: self.unanswered,
            refused_everywhere,
        };
        (Box::new(refused), next)
    }
}

#[cfg(test)]
mod tests;
