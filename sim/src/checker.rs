//! The properties checked after every step of a simulation, on true time (µs).
//!
//! A client's claims ([`Note`]) are judged against each other and against the servers:
//! - **one holder**: no two clients hold by their own validity at the same true time;
//! - **fences**: grants carry strictly increasing fences, and uses of the resource never go
//!   back to an older fence (only while no node lost its counter in a restart without
//!   persistence: the counter survives only on disk);
//! - **lease**: while a client holds, a quorum of nodes keep its token at least until the end
//!   of its validity (a node that is down counts: it grants nobody);
//! - **use**: a client acts only inside its hold;
//! - **no orphan**: a token's key is gone one TTL (plus the longest wait of a request before
//!   it runs, and the drift allowance) after its attempt or hold ended;
//! - **liveness**: once every fault has healed and stale keys have expired, a free lock that
//!   someone waits for is granted within a bound.

use std::collections::BTreeMap;

use crate::client::Note;

/// What the checker may look at in the world.
pub trait View {
    /// Number of nodes.
    fn nodes(&self) -> usize;
    /// Whether node `i` is down (restarting).
    fn is_down(&self, i: usize) -> bool;
    /// The lock key on node `i` at true time `t`: its value and the last true time (µs) at
    /// which it still exists (`None`: no expiry); `None` when there is no live key.
    fn lock_key(&mut self, i: usize, t: u64) -> Option<(Vec<u8>, Option<u64>)>;
    /// The true time at which client `c`'s boot clock reads `boot`.
    fn boot_to_true(&self, c: usize, boot: u64) -> u64;
}

/// A property that failed, with the true time at which it was seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// True time (µs).
    pub at: u64,
    /// What failed, as a sentence.
    pub what: String,
    /// Whether it is the liveness property that failed (the lock free and wanted for too
    /// long after the faults healed, or the clients stopped), rather than one about holders,
    /// fences, leases or the keys a client left behind.
    pub liveness: bool,
}

#[derive(Clone, Debug)]
struct Claim {
    token: Vec<u8>,
    fence: u64,
    /// True time at which the holder's validity ends.
    end: u64,
}

/// Bounds the checker needs.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The lock TTL (µs).
    pub ttl: u64,
    /// The longest a request can wait before it runs (µs): the network's longest delay plus
    /// the longest freeze of the node it waits at.
    pub max_delay: u64,
    /// Allowance for clock drift (µs).
    pub drift: u64,
    /// True time from which faults are over and stale keys have expired (µs).
    pub quiet_from: u64,
    /// Longest a free, wanted lock may stay ungranted in the quiet phase (µs).
    pub liveness: u64,
}

/// The checker's state.
pub struct Checker {
    limits: Limits,
    quorum: usize,
    claims: BTreeMap<usize, Claim>,
    /// When each token's attempt or hold ended (absent while it runs).
    ended: BTreeMap<Vec<u8>, Option<u64>>,
    last_fence: u64,
    last_use_fence: u64,
    /// Whether fences are judged (the lock fences, and no node lost its counter).
    pub fences_kept: bool,
    waiting: BTreeMap<usize, u64>,
    free_since: u64,
    /// The first failure seen.
    pub violation: Option<Violation>,
    /// Grants seen.
    pub grants: u64,
}

impl Checker {
    /// A checker for `nodes` nodes.
    pub fn new(nodes: usize, limits: Limits) -> Checker {
        Checker {
            limits,
            quorum: nodes / 2 + 1,
            claims: BTreeMap::new(),
            ended: BTreeMap::new(),
            last_fence: 0,
            last_use_fence: 0,
            fences_kept: true,
            waiting: BTreeMap::new(),
            free_since: 0,
            violation: None,
            grants: 0,
        }
    }

    /// True time from which liveness is judged.
    pub fn quiet_from(&self) -> u64 {
        self.limits.quiet_from
    }

    fn fail(&mut self, at: u64, what: String) {
        self.fail_as(at, what, false);
    }

    fn fail_as(&mut self, at: u64, what: String, liveness: bool) {
        if self.violation.is_none() {
            self.violation = Some(Violation { at, what, liveness });
        }
    }

    fn active(&self, c: usize, t: u64) -> Option<&Claim> {
        self.claims.get(&c).filter(|claim| claim.end > t)
    }

    /// A claim from client `c` at true time `t`.
    pub fn note(&mut self, c: usize, note: &Note, t: u64, view: &mut dyn View) {
        match note {
            Note::Wants => {
                self.waiting.insert(c, t);
            }
            Note::Attempt { token } => {
                self.ended.insert(token.clone(), None);
            }
            Note::AttemptOver { token } => {
                self.ended.insert(token.clone(), Some(t));
            }
            Note::Acquired {
                token,
                fence,
                valid_until,
            } => {
                self.grants += 1;
                self.waiting.remove(&c);
                let end = view.boot_to_true(c, *valid_until);
                if let Some((other, claim)) =
                    self.claims.iter().find(|(o, cl)| **o != c && cl.end > t)
                {
                    let (other, until) = (*other, claim.end);
                    self.fail(t, format!("two holders: client {c} acquired while client {other} holds until {until} µs"));
                }
                if self.fences_kept && *fence <= self.last_fence {
                    let last = self.last_fence;
                    self.fail(
                        t,
                        format!("fence went back: client {c} got {fence} after {last}"),
                    );
                }
                self.last_fence = self.last_fence.max(*fence);
                self.claims.insert(
                    c,
                    Claim {
                        token: token.clone(),
                        fence: *fence,
                        end,
                    },
                );
                self.check_lease(c, t, view);
            }
            Note::Extended { valid_until } => {
                let end = view.boot_to_true(c, *valid_until);
                if let Some(claim) = self.claims.get_mut(&c) {
                    claim.end = end;
                }
                self.check_lease(c, t, view);
            }
            Note::Use { fence } => {
                match self.active(c, t) {
                    None => self.fail(t, format!("client {c} used the resource outside its hold")),
                    Some(claim) if claim.fence != *fence => self.fail(
                        t,
                        format!(
                            "client {c} used fence {fence} while holding {}",
                            claim.fence
                        ),
                    ),
                    Some(_) => {}
                }
                if self.fences_kept && *fence < self.last_use_fence {
                    let last = self.last_use_fence;
                    self.fail(
                        t,
                        format!("client {c} used fence {fence} after fence {last} was used"),
                    );
                }
                self.last_use_fence = self.last_use_fence.max(*fence);
            }
            Note::Releasing | Note::Lost => {
                if let Some(claim) = self.claims.remove(&c) {
                    self.ended.insert(claim.token, Some(t));
                }
            }
        }
    }

    /// A quorum of nodes keep `c`'s token at least until its validity ends.
    fn check_lease(&mut self, c: usize, t: u64, view: &mut dyn View) {
        let Some(claim) = self.active(c, t).cloned() else {
            return;
        };
        let mut kept = 0;
        let mut seen = Vec::new();
        for i in 0..view.nodes() {
            let key = view.lock_key(i, t);
            let ok = view.is_down(i)
                || matches!(&key, Some((v, until)) if *v == claim.token && until.is_none_or(|u| u + 1_000 >= claim.end));
            kept += ok as usize;
            seen.push(key.map(|(v, u)| (String::from_utf8_lossy(&v).into_owned(), u)));
        }
        if kept < self.quorum {
            let end = claim.end;
            self.fail(t, format!("client {c} holds until {end} µs, but only {kept} node(s) keep its lease that long: {seen:?}"));
        }
    }

    /// Checks what must hold after every step at true time `t`.
    pub fn after_step(&mut self, t: u64, view: &mut dyn View) {
        let holders: Vec<usize> = self
            .claims
            .iter()
            .filter(|(_, cl)| cl.end > t)
            .map(|(c, _)| *c)
            .collect();
        for &c in &holders {
            self.check_lease(c, t, view);
        }
        // No orphan outlives its attempt or hold by more than one TTL.
        let grace = self.limits.ttl + self.limits.max_delay + self.limits.drift + 2_000;
        for i in 0..view.nodes() {
            if let Some((token, _)) = view.lock_key(i, t)
                && let Some(Some(end)) = self.ended.get(&token)
                && t > end + grace
            {
                let (token, end) = (String::from_utf8_lossy(&token).into_owned(), *end);
                self.fail(
                    t,
                    format!("node {i} still has {token:?}, whose holder ended at {end} µs"),
                );
            }
        }
        self.check_liveness(t, holders.is_empty());
    }

    fn check_liveness(&mut self, t: u64, free: bool) {
        if !free {
            self.free_since = t;
            return;
        }
        let Some(&since) = self.waiting.values().min() else {
            self.free_since = t;
            return;
        };
        let from = since.max(self.free_since).max(self.limits.quiet_from);
        if t > from + self.limits.liveness {
            let waited = (t - from) / 1000;
            self.fail_as(
                t,
                format!("the lock was free and wanted for {waited} ms after every fault healed"),
                true,
            );
        }
    }
}
