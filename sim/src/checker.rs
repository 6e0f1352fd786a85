//! The properties checked after every step of a simulation, on true time (µs).
//!
//! A client's claims ([`Note`]) are judged against each other and against the servers:
//! - **holders**: no two clients hold a mutex by their own validity at the same true time; no
//!   more than a semaphore's permits; a read-write lock's writer alone, its readers together;
//! - **fences**: grants carry strictly increasing fences (a read hold: at least the last
//!   write's, which it observes), and uses of the resource never go back to an older fence
//!   (a read-write lock: to an older write's; a semaphore's holders use theirs side by side),
//!   only while no node lost its counter in a restart without persistence: the counter
//!   survives only on disk;
//! - **lease**: while a client holds, a quorum of nodes keep its token (the lock key's value,
//!   or its member of the holders' set) at least until the end of its validity (a node that
//!   is down counts: it grants nobody);
//! - **use**: a client acts only inside its hold;
//! - **no orphan**: a token's key is gone one TTL (plus the longest wait of a request before
//!   it runs, and the drift allowance) after its attempt or hold ended; in worlds that lose
//!   no message, a refused attempt's within a few node timeouts ([`Limits::undone_within`]);
//! - **liveness**: once every fault has healed and stale keys have expired, a free lock that
//!   someone waits for is granted within a bound; and no read hold is granted while a writer
//!   has waited for longer than its first round takes (readers queue behind waiting writers).

use std::collections::BTreeMap;

use crate::client::Note;

mod orphans;
mod vanish;

/// What the clients of a world share: one mutex, one semaphore, or one read-write lock (its
/// read holds and its write side, the mutex, on one name).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// A mutex: one holder at a time.
    Mutex,
    /// A counting semaphore with this many permits: at most that many holders; one node, as
    /// the library allows.
    Semaphore(u32),
    /// A read-write lock: each call takes a read hold or the write side at random; any number
    /// of readers, or one writer alone.
    RwLock,
}

impl Shape {
    /// How many claims may be live at once (exclusive claims are alone whatever this says).
    fn capacity(self) -> usize {
        match self {
            Shape::Mutex => 1,
            Shape::Semaphore(permits) => permits as usize,
            Shape::RwLock => usize::MAX,
        }
    }
}

/// What the checker may look at in the world.
pub trait View {
    /// Number of nodes.
    fn nodes(&self) -> usize;
    /// Whether node `i` is down (restarting).
    fn is_down(&self, i: usize) -> bool;
    /// The holds stored on node `i` at true time `t`: the lock key's value, and each live
    /// member of the holders' set (a semaphore's permits, a read-write lock's read holds),
    /// each with the last true time (µs) at which it still lives (`None`: no expiry).
    fn holds(&mut self, i: usize, t: u64) -> Vec<(Vec<u8>, Option<u64>)>;
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
    /// A semaphore's permit or a read hold, rather than the mutex (a write).
    shared: bool,
    /// Someone outside the lock removed its key from so many nodes that fewer than a quorum
    /// keep it: the lock is lost, whether its holder knows it yet or not. Its lease, its
    /// exclusion and its uses are judged no more; its holder must learn of the loss.
    doomed: bool,
    /// A flushed node stored its key since its last grant or renewal: a renewal under way
    /// may be confirmed by a node that lost the key after it confirmed.
    flushed: bool,
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
    /// How long after a writer began to wait its announcement may not have reached the
    /// nodes yet, in the quiet phase (µs): until then a reader may still go first.
    pub announced_after: u64,
    /// In worlds where no message is lost (see [`Config::cutting`](crate::world::Config)):
    /// how long after a refused attempt ended its token may stay on a node (µs). A late
    /// grant is undone as it runs, by the undo written behind its request, or by a clean-up
    /// on a new connection when that undo could not be written; either is far sooner than
    /// the TTL that bounds an orphan otherwise.
    pub undone_within: Option<u64>,
}

/// The checker's state.
pub struct Checker {
    limits: Limits,
    shape: Shape,
    quorum: usize,
    claims: BTreeMap<usize, Claim>,
    /// When each token's attempt or hold ended (absent while it runs).
    ended: BTreeMap<Vec<u8>, Option<u64>>,
    /// When each refused attempt ended, with [`Limits::undone_within`].
    refused: BTreeMap<Vec<u8>, u64>,
    last_fence: u64,
    /// Every fence a semaphore's permit was granted with.
    permit_fences: std::collections::BTreeSet<u64>,
    last_use_fence: u64,
    /// Whether fences are judged (the lock fences).
    pub fences_kept: bool,
    /// Whether a node lost its fence counter (a restart without persistence): a grant's fence
    /// must still be larger than every earlier one, but a read hold's, the last write's as
    /// its nodes have it, may then be an older write's (a resource refuses it: the safe
    /// direction) until the next write.
    pub counter_lost: bool,
    /// Clients releasing a claim that was doomed: their release must not be reported clean.
    doomed_releases: std::collections::BTreeSet<usize>,
    /// Tokens of attempts still running that a flushed node stored: granted later, their
    /// claim may be doomed from the start.
    vanished: std::collections::BTreeSet<Vec<u8>>,
    /// Since when each client waits, and whether for a shared hold.
    waiting: BTreeMap<usize, (u64, bool)>,
    free_since: u64,
    /// The first failure seen.
    pub violation: Option<Violation>,
    /// Grants seen.
    pub grants: u64,
    /// Grants of shared holds (a semaphore's permits, read holds) seen.
    pub shared_grants: u64,
    /// The most claims live at once, counted at each grant.
    pub most_holders: usize,
}

impl Checker {
    /// A checker for `nodes` nodes whose clients share a lock of `shape`.
    pub fn new(nodes: usize, shape: Shape, limits: Limits) -> Checker {
        Checker {
            limits,
            shape,
            quorum: nodes / 2 + 1,
            claims: BTreeMap::new(),
            ended: BTreeMap::new(),
            refused: BTreeMap::new(),
            last_fence: 0,
            permit_fences: Default::default(),
            last_use_fence: 0,
            fences_kept: true,
            counter_lost: false,
            doomed_releases: Default::default(),
            vanished: Default::default(),
            waiting: BTreeMap::new(),
            free_since: 0,
            violation: None,
            grants: 0,
            shared_grants: 0,
            most_holders: 0,
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
            Note::Wants { shared } => {
                self.waiting.insert(c, (t, *shared));
            }
            Note::GaveUp => {
                self.waiting.remove(&c);
            }
            Note::Attempt { token } => {
                self.ended.insert(token.clone(), None);
            }
            Note::AttemptOver { token } => {
                self.ended.insert(token.clone(), Some(t));
                if self.limits.undone_within.is_some() {
                    self.refused.insert(token.clone(), t);
                }
            }
            Note::Acquired {
                token,
                fence,
                valid_until,
                shared,
            } => {
                self.grants += 1;
                self.waiting.remove(&c);
                let end = view.boot_to_true(c, *valid_until);
                // Granted by a round that a flush cut short: a node granted, and lost the key
                // before the grant was known. Nobody can tell; the holder must learn of it.
                let doomed =
                    self.vanished.remove(token) && self.keeping(token, end, t, view) < self.quorum;
                if !doomed {
                    self.check_holders(c, *shared, t);
                    if *shared && self.shape == Shape::RwLock {
                        self.check_no_overtaking(c, t);
                    }
                    self.check_grant_fence(c, *fence, *shared, t);
                }
                self.claims.insert(
                    c,
                    Claim {
                        token: token.clone(),
                        fence: *fence,
                        end,
                        shared: *shared,
                        doomed,
                        flushed: false,
                    },
                );
                self.doomed_releases.remove(&c);
                self.check_lease(c, t, view);
            }
            Note::Extended { valid_until } => {
                let end = view.boot_to_true(c, *valid_until);
                // A renewal confirmed by a node that lost the key after it confirmed.
                let flushed = self.claims.get(&c).is_some_and(|claim| claim.flushed);
                let token = self.claims.get(&c).map(|claim| claim.token.clone());
                let doomed = flushed
                    && token.is_some_and(|token| self.keeping(&token, end, t, view) < self.quorum);
                if let Some(claim) = self.claims.get_mut(&c) {
                    claim.end = end;
                    claim.doomed |= doomed;
                    claim.flushed = false;
                }
                self.check_lease(c, t, view);
            }
            Note::Use { fence } => {
                let shared = match self.active(c, t) {
                    None => {
                        self.fail(t, format!("client {c} used the resource outside its hold"));
                        return;
                    }
                    Some(claim) if claim.fence != *fence => {
                        let held = claim.fence;
                        self.fail(
                            t,
                            format!("client {c} used fence {fence} while holding {held}"),
                        );
                        return;
                    }
                    Some(claim) => claim.shared,
                };
                // A doomed holder's uses are refused by a resource that enforces fences.
                let doomed = self.active(c, t).is_some_and(|claim| claim.doomed);
                // A semaphore's holders use their fences side by side, in any order.
                if doomed
                    || !self.fences_kept
                    || matches!(self.shape, Shape::Semaphore(_))
                    || (shared && self.counter_lost)
                {
                    return;
                }
                if *fence < self.last_use_fence {
                    let last = self.last_use_fence;
                    self.fail(
                        t,
                        format!("client {c} used fence {fence} after fence {last} was used"),
                    );
                }
                // A read hold's fence is the last write it may observe: a later write can
                // carry a smaller one (a counter raised by attempts that failed), so only
                // the uses of writes set the bar.
                if !shared {
                    self.last_use_fence = self.last_use_fence.max(*fence);
                }
            }
            Note::Releasing | Note::Lost => {
                if let Some(claim) = self.claims.remove(&c) {
                    // A doomed claim whose token fewer than a quorum of nodes still store
                    // as its release begins cannot be released by it.
                    if claim.doomed && matches!(note, Note::Releasing) {
                        let kept = (0..view.nodes())
                            .filter(|&i| {
                                view.is_down(i)
                                    || view.holds(i, t).iter().any(|(v, _)| *v == claim.token)
                            })
                            .count();
                        if kept < self.quorum {
                            self.doomed_releases.insert(c);
                        }
                    }
                    self.ended.insert(claim.token, Some(t));
                }
            }
            // Only a release that asked a node again may read "missing" there as its own
            // earlier attempt's doing (it cannot tell that from a key that vanished).
            Note::Released { clean, retried } => {
                if self.doomed_releases.remove(&c) && *clean && !*retried {
                    self.fail(
                        t,
                        format!("client {c}'s release was reported clean, but its key had vanished from too many nodes while it held the lock"),
                    );
                }
            }
        }
    }

    /// No holder beside a new exclusive claim; beside a shared one, no exclusive claim and no
    /// more claims than the lock's capacity.
    fn check_holders(&mut self, c: usize, shared: bool, t: u64) {
        let others: Vec<(usize, Claim)> = self
            .claims
            .iter()
            .filter(|(o, cl)| **o != c && cl.end > t && !cl.doomed)
            .map(|(o, cl)| (*o, cl.clone()))
            .collect();
        if let Some((other, claim)) = others.iter().find(|(_, cl)| !shared || !cl.shared) {
            let (what, until) = (if claim.shared { "shares" } else { "holds" }, claim.end);
            self.fail(
                t,
                format!("two holders: client {c} acquired while client {other} {what} the lock until {until} µs"),
            );
        }
        self.shared_grants += u64::from(shared);
        self.most_holders = self.most_holders.max(others.len() + 1);
        if others.len() + 1 > self.shape.capacity() {
            let (n, cap) = (others.len() + 1, self.shape.capacity());
            let others: Vec<usize> = others.iter().map(|(o, _)| *o).collect();
            self.fail(
                t,
                format!("{n} holders of {cap} permits: client {c} acquired while clients {others:?} hold"),
            );
        }
    }

    /// A grant's fence is larger than every earlier grant's; a read hold's, at least the last
    /// write's (it is the counter's value, not a new one). A semaphore's permits are granted
    /// side by side and their replies can come in another order than the grants: each permit's
    /// fence is one no other permit had.
    fn check_grant_fence(&mut self, c: usize, fence: u64, shared: bool, t: u64) {
        if !self.fences_kept {
            return;
        }
        if let Shape::Semaphore(_) = self.shape {
            if !self.permit_fences.insert(fence) {
                self.fail(
                    t,
                    format!("client {c} got fence {fence}, which a permit had before"),
                );
            }
            return;
        }
        let observes = shared && self.shape == Shape::RwLock;
        if observes && self.counter_lost {
            return;
        }
        let last = self.last_fence;
        if fence < last || (fence == last && !observes) {
            self.fail(
                t,
                format!("fence went back: client {c} got {fence} after {last}"),
            );
        }
        if !observes {
            self.last_fence = last.max(fence);
        }
    }

    /// A quorum of nodes keep `c`'s token at least until its validity ends.
    fn check_lease(&mut self, c: usize, t: u64, view: &mut dyn View) {
        let Some(claim) = self.active(c, t).cloned().filter(|claim| !claim.doomed) else {
            return;
        };
        let mut kept = 0;
        let mut seen = Vec::new();
        for i in 0..view.nodes() {
            let holds = view.holds(i, t);
            let ok = view.is_down(i)
                || holds.iter().any(|(v, until)| {
                    *v == claim.token && until.is_none_or(|u| u + 1_000 >= claim.end)
                });
            kept += ok as usize;
            seen.push(
                holds
                    .into_iter()
                    .map(|(v, u)| (String::from_utf8_lossy(&v).into_owned(), u))
                    .collect::<Vec<_>>(),
            );
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
        self.check_orphans(t, view);
        // Free: a permit left, or nobody holding a mutex or a read-write lock (a reader may
        // rightly wait behind a waiting writer while others read).
        let free = match self.shape {
            Shape::Semaphore(permits) => holders.len() < permits as usize,
            Shape::Mutex | Shape::RwLock => holders.is_empty(),
        };
        self.check_liveness(t, free);
    }

    /// A read hold granted to `c` at `t` in the quiet phase: no writer has been waiting since
    /// before its announcement surely reached the nodes (readers queue behind waiting
    /// writers, or a stream of readers would starve them).
    fn check_no_overtaking(&mut self, c: usize, t: u64) {
        let from = self.limits.quiet_from;
        let writer = self.waiting.iter().find(|(w, (since, shared))| {
            **w != c && !shared && *since >= from && t > since + self.limits.announced_after
        });
        if let Some((&w, &(since, _))) = writer {
            self.fail(
                t,
                format!("client {c} got a read hold while client {w} had waited to write since {since} µs"),
            );
        }
    }

    fn check_liveness(&mut self, t: u64, free: bool) {
        if !free {
            self.free_since = t;
            return;
        }
        let Some(since) = self.waiting.values().map(|w| w.0).min() else {
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
