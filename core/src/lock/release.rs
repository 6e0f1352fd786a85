//! Ending a lease: the release on every node (riding over a short outage), what it did on
//! each, and the user's extension of a lease.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::calls::release_call;
use super::cleanup::Cleanup;
use super::clock::{Reading, Stamp};
use super::lease::Lease;
use super::proto::hold::refusal;
use super::proto::release::{ReleaseRound, released};
use super::renew::{Renewable, Renewal, extension_round, fire};
use super::scripts::only_to;
use super::tally::Tally;
use super::token;
use crate::error::{Error, ErrorKind, NodeReport};
use crate::net::{self, Enough};
use crate::options::check_ttl;
use crate::process;

impl Lease {
    /// Releases on every node; used by `unlock` and `Drop`.
    pub(crate) fn release(&self) -> Result<Released, Error> {
        let _scope = process::Scope::enter();
        if !self.owned_here() {
            return Err(Error::new(
                ErrorKind::NotHeld,
                "this guard was inherited through fork; only the process that took the lock releases it",
            ));
        }
        let _op = self.op.lock();
        let now = self.voters.clock.read();
        let (lost, valid_until, waiting) = {
            let mut st = self.state.lock();
            let Ok(lost) = st.hold.release(now.stamp) else {
                return Err(Error::new(
                    ErrorKind::NotHeld,
                    "the lock was already released",
                ));
            };
            (lost, st.hold.valid_until, st.waiting)
        };
        if waiting > 0 {
            self.lost_cv.notify_all();
        }
        let tally = self.release_everywhere(&now, valid_until);
        let released = released(&self.spec, &tally);
        let refused = released == Err(ErrorKind::Lost);
        self.end(match &lost {
            Some(why) => Some(why.reason),
            // Found lost by the release itself.
            None if refused => Some(refusal(&tally)),
            None => None,
        });
        // Bookkeeping after the release is sent: a waiter's wake-up does not wait for it (no
        // callback runs once `released` is set, and the renew thread skips the guard).
        self.callbacks.lock().clear();
        self.voters.renewer.forget();
        let n = self.spec.n;
        if lost.is_none() && released.is_ok() {
            return Ok(Released::from_tally(tally));
        }
        Err(unreleased(
            lost.map(|w| w.text),
            tally,
            n - self.spec.quorum,
        ))
    }
}

/// Why a release did not succeed: the lock was lost before it (`lost`, or more than
/// `tolerated` nodes said it is not ours), or too few nodes confirmed it.
#[cold]
#[inline(never)]
fn unreleased(lost: Option<String>, tally: Tally, tolerated: usize) -> Error {
    if lost.is_some() || tally.refused > tolerated {
        let what = match lost {
            Some(why) => format!("the lock was lost before it was released: {why}"),
            None => "the lock was lost before it was released".to_owned(),
        };
        return Error::from_report(&what, ErrorKind::Lost, tally.reports, None)
            .with_kind(ErrorKind::Lost);
    }
    Error::from_report(
        "release was not confirmed by a quorum of nodes; the lock expires by its TTL",
        ErrorKind::NoQuorum,
        tally.reports,
        tally.source,
    )
}

impl Lease {
    /// Sends the release to every node; while fewer than a quorum confirmed and no quorum
    /// said "not yours", asks the nodes that failed again, like a lock call riding over an
    /// outage (a restart, a failover): for up to the connect timeout, and never past the
    /// lock's validity, after which it expires by itself.
    /// Returns the tally, where the nodes whose answers were left to come (the release ended
    /// at its quorum) are not waited for. `began` is the lease clock's reading when the
    /// release began.
    fn release_everywhere(&self, began: &Reading, valid_until: Stamp) -> Tally {
        let nodes = &self.voters.nodes;
        let call = release_call(&self.spec, &self.token, true);
        let give_up =
            (began.instant + self.voters.connect_timeout).min(began.instant_of(valid_until));
        let mut round = ReleaseRound::new(&self.spec, valid_until);
        loop {
            let calls = only_to(nodes.len(), round.asked(), &call);
            let deadline = Instant::now() + self.spec.node_timeout;
            // A release ends at its quorum too: the slower nodes' releases still run, and
            // their replies are read before their connections' next use.
            let mut left = round.asked().len();
            net::exchange_until(nodes, &calls, deadline, None, &mut |i, answer| {
                round.answer(i, answer.clone(), self.now());
                left -= 1;
                match round.settled() && left > 0 {
                    true => Enough::Yes { undo: false },
                    false => Enough::No,
                }
            });
            let (tally, done) = round.settle(nodes);
            if done {
                return tally;
            }
            // The call's waits were told to stop (see `crate::wake_on_checked`): the nodes
            // not known to have released are released in the background.
            if net::stopped() {
                let until = began.instant_of(valid_until);
                let cleanup = Cleanup::new(&self.spec, &self.token, round.asked().to_vec(), until);
                self.voters.renewer.clean_up(cleanup);
                return tally;
            }
            // Only now: the jitter reads the OS's random source, a system call per release.
            let pause = token::jitter(self.spec.opts.retry_delay);
            if Instant::now() + pause > give_up {
                return tally;
            }
            net::sleep(pause);
        }
    }
}

/// What an explicit unlock did on each node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// Nodes where our lock was deleted.
    pub released: usize,
    /// Nodes where the lock had already expired.
    pub expired: usize,
    /// Nodes where another owner's value had replaced ours (left untouched).
    pub taken: usize,
    /// Nodes that could not be asked.
    pub failed: usize,
    /// Nodes whose answer was not waited for: the release ended once a quorum confirmed it,
    /// and still runs there (their reports say [`NodeOutcome::NotWaitedFor`]).
    ///
    /// [`NodeOutcome::NotWaitedFor`]: crate::NodeOutcome::NotWaitedFor
    pub pending: usize,
    /// Each node's answer.
    pub nodes: Vec<NodeReport>,
}

impl Released {
    fn from_tally(t: Tally) -> Released {
        Released {
            released: t.yes,
            expired: t.missing,
            taken: t.refused - t.missing,
            failed: t.failed,
            pending: t.pending,
            nodes: t.reports,
        }
    }
}

impl Lease {
    /// Sets the lease to `ttl` from now on a quorum of nodes, checking the token; later
    /// renewals use this `ttl` too.
    pub(crate) fn extend(self: &Arc<Self>, ttl: Duration) -> Result<(), Error> {
        check_ttl(ttl)?;
        self.check()?;
        let op = self.op.lock();
        let voters = &self.voters;
        let lease: &dyn Renewable = &**self;
        let (t0, mut tallies) = extension_round(&voters.nodes, &*voters.clock, &[(lease, ttl)]);
        let tally = tallies.remove(0);
        let (result, callbacks) = self.settle_extend(t0, ttl, &tally, true);
        drop(op);
        fire(callbacks);
        match result {
            Renewal::Renewed(next) => {
                // One schedule per lease: this one replaces the renew thread's entry.
                let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                let weak: Weak<dyn Renewable> = Arc::downgrade(self) as Weak<Lease>;
                self.voters.renewer.reschedule(next, weak, generation);
                Ok(())
            }
            _ if !self.is_held() => {
                Err(
                    Error::from_report("the lock was lost", ErrorKind::Lost, tally.reports, None)
                        .with_kind(ErrorKind::Lost),
                )
            }
            _ => Err(tally.into_error(
                "extend was not confirmed by a quorum of nodes",
                ErrorKind::NoQuorum,
            )),
        }
    }
}
