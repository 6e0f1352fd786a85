//! Every lock whose name matches a pattern (`Client::list`), and breaking a stuck one
//! (`Client::force_unlock`).
//!
//! A lock is found by its companion keys (see `keys.rs`): the fence counter that every
//! fenced grant leaves (and that never expires), a read lock's or a semaphore's holders set,
//! a waiter queue. A scan (`SCAN`, never `KEYS`: the server stays free for others between
//! steps) of each server, every master of a cluster, turns those keys back into names; each
//! name's holds, fence and waiters are then read on every node, so that nodes of a Redlock
//! that disagree show it. A lock that leaves no companion — an unfenced mutex held with
//! nobody waiting — is only its own key, which no scan can tell from an application's string
//! key: `status` reads it by name.
//!
//! Breaking a lock reads each node's holds, then sends each node the release of what it
//! holds, with the holder's own token: the same compare-and-delete a holder's release is, so
//! a hold taken meanwhile by someone else is never removed, the fence counter is untouched
//! (later fences stay larger), and the waiters are woken as by any release.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::acquire::Plan;
use super::calls::release_call;
use super::glob;
use super::keys::Keys;
use super::proto::Kind;
use super::reply::{bytes, int};
use super::scripts::{Call, SHARED_STATUS, STATUS};
use super::tally::{Tally, unexpected};
use super::voters::Voters;
use crate::error::{Error, ErrorKind, NodeOutcome};
use crate::net::{self, Node};
use crate::options::{DEFAULT_TTL, MutexOptions, default_node_timeout};
use crate::wire::{Answer, Command};

/// Names read per round once the scan has found them.
const NAMES_PER_ROUND: usize = 100;
/// How many keys each scan step asks a server to look at.
const SCAN_COUNT: usize = 1000;

/// What a hold is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum HoldKind {
    /// A mutex, or the write side of a read-write lock (one key; they are the same hold).
    Exclusive,
    /// A read hold of a read-write lock.
    Read,
    /// A semaphore's permit.
    Permit,
}

impl HoldKind {
    /// `exclusive`, `read` or `permit`: how `redmutex list` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldKind::Exclusive => "exclusive",
            HoldKind::Read => "read",
            HoldKind::Permit => "permit",
        }
    }
}

/// One hold of a lock, as the nodes that have it see it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedHold {
    /// What it holds.
    pub kind: HoldKind,
    /// The holder's token (`owner-label:random-hex` for redmutex holders).
    pub holder: Vec<u8>,
    /// Its remaining lease, the shortest among the nodes that have it; `None` for a key
    /// without expiry (not one redmutex set).
    pub ttl: Option<Duration>,
    /// On how many nodes it is (listed), or was removed (force-unlocked).
    pub nodes: usize,
}

/// One lock that [`Client::list`](crate::Client::list) found.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedLock {
    /// The lock's name.
    pub name: Vec<u8>,
    /// Its holds, by kind, then holder.
    pub holds: Vec<ListedHold>,
    /// The last fence number granted for the name (the largest among the nodes).
    pub fence: u64,
    /// How many callers have announced that they wait for it (the most any node counts).
    pub waiters: u64,
    /// How many nodes answered: with several, a hold on fewer of them shows disagreement.
    pub nodes: usize,
}

impl ListedLock {
    /// Whether the nodes that answered disagree: some hold is not on every one of them (a
    /// Redlock node that missed a grant or a release; it settles as leases run out).
    pub fn disagree(&self) -> bool {
        self.holds.iter().any(|h| h.nodes < self.nodes)
    }
}

/// A hold as one node has it: what, whose, and its remaining lease.
type Hold = (HoldKind, Vec<u8>, Option<Duration>);

/// What one node holds of one name.
#[derive(Default)]
struct Seen {
    holds: Vec<Hold>,
    fence: u64,
    waiters: u64,
}

impl Voters {
    fn operator_timeout(&self) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| default_node_timeout(DEFAULT_TTL))
    }

    /// Every lock held or waited for whose name matches `pattern` (see the module's doc).
    pub(crate) fn list(&self, pattern: &[u8]) -> Result<Vec<ListedLock>, Error> {
        let names: Vec<Vec<u8>> = self.scan(pattern)?.into_iter().collect();
        let mut found = Vec::new();
        for chunk in names.chunks(NAMES_PER_ROUND) {
            let keys: Vec<(Keys, Keys)> = chunk
                .iter()
                .map(|n| (Keys::new(n), Keys::for_semaphore(n.clone())))
                .collect();
            let calls: Vec<Call> = keys.iter().flat_map(|(k, s)| reads(k, s)).collect();
            let per_name = READS + 2;
            let seen = self.read_each(&calls, per_name, "the locks' holds")?;
            for (j, name) in chunk.iter().enumerate() {
                let views: Vec<&Seen> = seen
                    .iter()
                    .filter_map(|s| s.as_ref())
                    .map(|s| &s[j])
                    .collect();
                let lock = merge(name.clone(), &views);
                if !lock.holds.is_empty() || lock.waiters > 0 {
                    found.push(lock);
                }
            }
        }
        Ok(found)
    }

    /// The names of every lock whose companion keys a scan of each server finds.
    fn scan(&self, pattern: &[u8]) -> Result<BTreeSet<Vec<u8>>, Error> {
        let nodes = &self.nodes;
        let timeout = self.operator_timeout();
        let mut tally = Tally::default();
        // Per node, each server still being scanned: its slot (a cluster's master) and cursor;
        // `None` once the node failed.
        let mut left: Vec<Option<Vec<Cursor>>> = Vec::new();
        for node in nodes {
            match node.servers_by_slot(Instant::now() + timeout) {
                Ok(slots) => left.push(Some(
                    slots.into_iter().map(|s| (s, b"0".to_vec())).collect(),
                )),
                Err(e) => {
                    tally.fail(&**node, e);
                    left.push(None);
                }
            }
        }
        let mut names = BTreeSet::new();
        while left.iter().flatten().any(|l| !l.is_empty()) {
            let requests: Vec<Vec<Command>> = left
                .iter()
                .map(|l| {
                    l.iter()
                        .flatten()
                        .map(|(slot, cursor)| scan_step(*slot, cursor))
                        .collect()
                })
                .collect();
            let refs: Vec<&[Command]> = requests.iter().map(Vec::as_slice).collect();
            let answers = net::exchange(nodes, &refs, Instant::now() + timeout, None);
            for ((node, answer), l) in nodes.iter().zip(answers).zip(&mut left) {
                // A node done scanning, or failed, was sent nothing.
                let Some(steps) = l.as_mut().filter(|s| !s.is_empty()).map(std::mem::take) else {
                    continue;
                };
                match scanned(steps, answer, pattern, &mut names) {
                    Ok(next) => *l = Some(next),
                    Err(f) => {
                        *l = None;
                        f.count(&mut tally, node);
                    }
                }
            }
        }
        for (node, _) in nodes.iter().zip(&left).filter(|(_, l)| l.is_some()) {
            tally.push(&**node, NodeOutcome::Ok);
        }
        if tally.yes < self.quorum {
            return Err(tally.into_error("not enough nodes answered the scan", ErrorKind::NoQuorum));
        }
        Ok(names)
    }

    /// Sends `calls` (`per_name` for each name, the first [`READS`] of them [`reads`]) to
    /// every node; each node's view of each name, `None` for a node that failed. Fewer than a
    /// quorum of answers is an error.
    fn read_each(
        &self,
        calls: &[Call],
        per_name: usize,
        what: &str,
    ) -> Result<Vec<Option<Vec<Seen>>>, Error> {
        let nodes = &self.nodes;
        let answers = net::exchange(
            nodes,
            &vec![calls; nodes.len()],
            Instant::now() + self.operator_timeout(),
            None,
        );
        let mut tally = Tally::default();
        let mut seen = Vec::new();
        for (node, answer) in nodes.iter().zip(answers) {
            match views(answer, per_name) {
                Ok(v) => {
                    tally.push(&**node, NodeOutcome::Ok);
                    seen.push(Some(v));
                }
                Err(f) => {
                    f.count(&mut tally, node);
                    seen.push(None);
                }
            }
        }
        if tally.yes < self.quorum {
            let what = format!("not enough nodes answered for {what}");
            return Err(tally.into_error(&what, ErrorKind::NoQuorum));
        }
        Ok(seen)
    }

    /// Removes every hold of the lock `name` (see the module's doc): what was removed, each
    /// with the number of nodes it was removed from.
    pub(crate) fn force_unlock(self: &Arc<Self>, name: &[u8]) -> Result<Vec<ListedHold>, Error> {
        let opts = MutexOptions::default();
        let mutex = Plan::new(self, &Arc::new(Keys::for_name(name.to_vec())), &opts)?;
        let keys = Arc::clone(&mutex.spec.keys);
        let read = Plan::for_kind(self, &keys, &opts, Kind::Read)?;
        let sem_keys = Arc::new(Keys::for_semaphore(name.to_vec()));
        // A client of several masters has no semaphores; their permits are left alone.
        let sem = Plan::for_kind(self, &sem_keys, &opts, Kind::Semaphore(1)).ok();
        let seen = self.read_each(&reads(&keys, &sem_keys)[..READS], READS, "the lock's holds")?;
        // Per node: what it holds, and the release of each.
        let mut holds: Vec<Vec<Hold>> = Vec::new();
        let mut releases: Vec<Vec<Call>> = Vec::new();
        for s in &seen {
            let (mut mine, mut calls) = (Vec::new(), Vec::new());
            for (kind, holder, ttl) in s.iter().flat_map(|s| &s[0].holds) {
                let plan = match kind {
                    HoldKind::Exclusive => Some(&mutex),
                    HoldKind::Read => Some(&read),
                    HoldKind::Permit => sem.as_ref(),
                };
                if let Some(plan) = plan {
                    calls.push(release_call(&plan.spec, holder, true));
                    mine.push((*kind, holder.clone(), *ttl));
                }
            }
            holds.push(mine);
            releases.push(calls);
        }
        let refs: Vec<&[Call]> = releases.iter().map(Vec::as_slice).collect();
        let answers = net::exchange(
            &self.nodes,
            &refs,
            Instant::now() + mutex.spec.node_timeout,
            None,
        );
        let mut removed = Seen::default();
        let mut tally = Tally::default();
        for ((node, answer), mine) in self.nodes.iter().zip(answers).zip(holds) {
            match answer {
                Ok(replies) => {
                    for (hold, reply) in mine.into_iter().zip(replies) {
                        // 1: this node's release removed it (0: gone meanwhile; -1: someone
                        // else holds the name there now, and keeps it).
                        if matches!(reply, Ok(Value::Int(1))) {
                            removed.holds.push(hold);
                        }
                    }
                    tally.push(&**node, NodeOutcome::Ok);
                }
                Err(e) => tally.fail(&**node, e),
            }
        }
        if tally.yes < self.quorum {
            return Err(tally.into_error(
                "not enough nodes answered the forced release",
                ErrorKind::NoQuorum,
            ));
        }
        Ok(merge(name.to_vec(), &[&removed]).holds)
    }
}

/// How many of a name's calls [`reads`] makes.
const READS: usize = 3;

/// The calls that read a name's holds on one node: the exclusive holder, the read holds,
/// the permits; then (for `list`) its waiters, of a lock and of a semaphore.
fn reads(keys: &Keys, sem: &Keys) -> Vec<Call> {
    vec![
        Call::new(&STATUS, &[&keys.lock, &keys.fence], &[]),
        Call::new(
            &SHARED_STATUS,
            &[&keys.readers, &keys.permits, &keys.fence],
            &[],
        ),
        Call::new(
            &SHARED_STATUS,
            &[&keys.holders, &keys.permits, &keys.fence],
            &[],
        ),
        zcard(&keys.waiters),
        zcard(&sem.waiters),
    ]
}

fn zcard(key: &[u8]) -> Call {
    let mut cmd = redis::cmd("ZCARD");
    cmd.arg(key);
    Call::Command(Command::keyed(cmd, net::key_slot(key)))
}

fn scan_step(slot: Option<u16>, cursor: &[u8]) -> Command {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor).arg("COUNT").arg(SCAN_COUNT);
    match slot {
        Some(s) => Command::keyed(cmd, s),
        None => Command::new(cmd),
    }
}

/// Why a node's answer gives no view.
enum Fault {
    Net(crate::wire::NetError),
    Reply(NodeOutcome),
}

impl Fault {
    /// Counts it in `tally` as `node`'s answer.
    fn count(self, tally: &mut Tally, node: &Node) {
        match self {
            Fault::Net(e) => tally.fail(node, e),
            Fault::Reply(outcome) => tally.push(node, outcome),
        }
    }
}

/// A server still being scanned: its slot (for a cluster's master) and the cursor to go on
/// from.
type Cursor = (Option<u16>, Vec<u8>);

/// One node's answer to its scan steps: the names found (matching `pattern`) go into
/// `names`; returns the steps still to make.
fn scanned(
    steps: Vec<Cursor>,
    answer: Answer,
    pattern: &[u8],
    names: &mut BTreeSet<Vec<u8>>,
) -> Result<Vec<Cursor>, Fault> {
    let replies = answer.map_err(Fault::Net)?;
    if replies.len() != steps.len() {
        return Err(Fault::Reply(unexpected("scan reply", &[])));
    }
    let mut next = Vec::new();
    for ((slot, _), reply) in steps.into_iter().zip(replies) {
        let reply = reply.map_err(Fault::Net)?;
        let Value::Array(items) = &reply else {
            return Err(Fault::Reply(unexpected("scan reply", &[&reply])));
        };
        let [cursor, Value::Array(keys)] = items.as_slice() else {
            return Err(Fault::Reply(unexpected("scan reply", &[&reply])));
        };
        names.extend(
            keys.iter()
                .filter_map(|k| Keys::name_of_companion(&bytes(k)))
                .filter(|n| glob::matches(pattern, n)),
        );
        let cursor = bytes(cursor);
        if cursor != b"0" {
            next.push((slot, cursor));
        }
    }
    Ok(next)
}

/// A node's answer to [`reads`] calls, `per_name` for each name: what it holds of each.
fn views(answer: Answer, per_name: usize) -> Result<Vec<Seen>, Fault> {
    let replies = answer.map_err(Fault::Net)?;
    let mut values = Vec::with_capacity(replies.len());
    for r in replies {
        values.push(r.map_err(Fault::Net)?);
    }
    values
        .chunks(per_name)
        .map(|c| {
            seen(c).ok_or_else(|| Fault::Reply(unexpected("reply", &c.iter().collect::<Vec<_>>())))
        })
        .collect()
}

/// One name's replies on one node, or `None` when they are not what the calls return.
fn seen(replies: &[Value]) -> Option<Seen> {
    let mut s = Seen::default();
    let Value::Array(status) = replies.first()? else {
        return None;
    };
    let [holder, pttl, fence] = status.as_slice() else {
        return None;
    };
    let holder = bytes(holder);
    if !holder.is_empty() {
        let pttl = int(pttl);
        let ttl = (pttl >= 0).then(|| Duration::from_millis(pttl as u64));
        s.holds.push((HoldKind::Exclusive, holder, ttl));
    }
    s.fence = int(fence).max(0) as u64;
    for (kind, reply) in [
        (HoldKind::Read, replies.get(1)?),
        (HoldKind::Permit, replies.get(2)?),
    ] {
        let Value::Array(items) = reply else {
            return None;
        };
        for pair in items.get(2..)?.chunks(2) {
            if let [m, ms] = pair {
                let ttl = Duration::from_millis(int(ms).max(0) as u64);
                s.holds.push((kind, bytes(m), Some(ttl)));
            }
        }
    }
    for w in replies.get(READS..).unwrap_or_default() {
        s.waiters += int(w).max(0) as u64;
    }
    Some(s)
}

/// One name's views from the nodes that answered, as one lock.
fn merge(name: Vec<u8>, views: &[&Seen]) -> ListedLock {
    let mut holds: BTreeMap<(HoldKind, Vec<u8>), (Option<Duration>, usize)> = BTreeMap::new();
    for v in views {
        for (kind, holder, ttl) in &v.holds {
            let e = holds.entry((*kind, holder.clone())).or_insert((*ttl, 0));
            e.0 = match (e.0, *ttl) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            e.1 += 1;
        }
    }
    ListedLock {
        name,
        holds: holds
            .into_iter()
            .map(|((kind, holder), (ttl, nodes))| ListedHold {
                kind,
                holder,
                ttl,
                nodes,
            })
            .collect(),
        fence: views.iter().map(|v| v.fence).max().unwrap_or(0),
        waiters: views.iter().map(|v| v.waiters).max().unwrap_or(0),
        nodes: views.len(),
    }
}
