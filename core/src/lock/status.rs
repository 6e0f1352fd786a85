//! Who holds a lock, for how long, and its last fence, as a quorum of nodes sees it: a mutex,
//! a semaphore's permits, a read-write lock's writer and readers.

use std::time::{Duration, Instant};

use redis::Value;

use super::acquire::Plan;
use super::keys::Keys;
use super::proto::Kind;
use super::reply::{bytes, int};
use super::scripts::{self, Call, SHARED_STATUS};
use super::tally::{Tally, unexpected};
use crate::error::{Error, ErrorKind, NodeOutcome};
use crate::net;

/// What `Mutex::status` finds in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The holder's value (`owner-label:random-hex` for redmutex holders), when a quorum of
    /// nodes agree on one; `None` when the lock is free.
    pub holder: Option<Vec<u8>>,
    /// The holder's remaining lease (the smallest among the agreeing nodes), if it has one.
    pub ttl: Option<Duration>,
    /// The last fence number granted for this name: the largest counter among the nodes, at
    /// least the holder's fence (with several nodes, a node whose answer a round did not wait
    /// for may have counted on to its own clock's time in µs).
    pub fence: u64,
}

impl Plan {
    /// Asks every node for the holder, its PTTL and the fence counter.
    pub(crate) fn status(&self) -> Result<LockStatus, Error> {
        let nodes = &self.voters.nodes;
        let call = Call::new(
            &scripts::STATUS,
            &[&self.spec.keys.lock, &self.spec.keys.fence],
            &[],
        );
        let answers = net::exchange(
            nodes,
            &vec![std::slice::from_ref(&call); nodes.len()],
            Instant::now() + self.spec.node_timeout,
            None,
        );
        let mut tally = Tally::default();
        let mut seen: Vec<(Vec<u8>, i64)> = Vec::new();
        let mut fence = 0u64;
        for (node, answer) in nodes.iter().zip(answers) {
            match answer.map(|mut v| v.pop()) {
                Ok(Some(Ok(Value::Array(items)))) if items.len() == 3 => {
                    let holder = bytes(&items[0]);
                    let pttl = int(&items[1]);
                    fence = fence.max(int(&items[2]).max(0) as u64);
                    if !holder.is_empty() {
                        seen.push((holder, pttl));
                    }
                    tally.push(&**node, NodeOutcome::Ok);
                }
                Ok(Some(Err(e))) | Err(e) => tally.fail(&**node, e),
                Ok(Some(Ok(other))) => tally.push(&**node, unexpected("reply", &[&other])),
                Ok(None) => tally.push(&**node, unexpected("reply", &[])),
            }
        }
        let quorum = self.voters.quorum;
        if tally.yes < quorum {
            return Err(tally.into_error("not enough nodes answered", ErrorKind::NoQuorum));
        }
        let mut holder = None;
        let mut ttl = None;
        for (value, _) in &seen {
            let agreeing: Vec<i64> = seen
                .iter()
                .filter(|(v, _)| v == value)
                .map(|(_, p)| *p)
                .collect();
            if agreeing.len() >= quorum {
                holder = Some(value.clone());
                ttl = agreeing
                    .iter()
                    .filter(|p| **p >= 0)
                    .min()
                    .map(|p| Duration::from_millis(*p as u64));
                break;
            }
        }
        Ok(LockStatus { holder, ttl, fence })
    }
}

/// What `Semaphore::status` finds in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreStatus {
    /// The permit count the live permits were taken with; `None` when no permit is held.
    pub permits: Option<u32>,
    /// Each live permit's token and remaining lease.
    pub holders: Vec<(Vec<u8>, Duration)>,
    /// The last fence number granted for this name.
    pub fence: u64,
}

/// What `RwLock::status` finds in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockStatus {
    /// The writer (or mutex holder, or any `SET NX` holder of the name) and its remaining
    /// lease, as [`LockStatus`] reports it.
    pub writer: LockStatus,
    /// Each live read hold's token and remaining lease (the shortest among a quorum of nodes
    /// that have it).
    pub readers: Vec<(Vec<u8>, Duration)>,
}

/// One node's answer: the stored count, the fence, the live members with their ms left.
type Seen = (u64, u64, Vec<(Vec<u8>, i64)>);

impl Plan {
    /// Asks every node for the live members of this lock's holders set; a member counts when
    /// a quorum of nodes has it.
    fn members(&self, set: &[u8], keys: &Keys) -> Result<Seen, Error> {
        let nodes = &self.voters.nodes;
        let call = Call::new(&SHARED_STATUS, &[set, &keys.permits, &keys.fence], &[]);
        let answers = net::exchange(
            nodes,
            &vec![std::slice::from_ref(&call); nodes.len()],
            Instant::now() + self.spec.node_timeout,
            None,
        );
        let mut tally = Tally::default();
        let (mut count, mut fence) = (0u64, 0u64);
        let mut all: Vec<(Vec<u8>, i64)> = Vec::new();
        for (node, answer) in nodes.iter().zip(answers) {
            match answer.map(|mut v| v.pop()) {
                Ok(Some(Ok(Value::Array(items)))) if items.len() >= 2 => {
                    count = count.max(int(&items[0]).max(0) as u64);
                    fence = fence.max(int(&items[1]).max(0) as u64);
                    for pair in items[2..].chunks(2) {
                        if let [m, p] = pair {
                            all.push((bytes(m), int(p)));
                        }
                    }
                    tally.push(&**node, NodeOutcome::Ok);
                }
                Ok(Some(Err(e))) | Err(e) => tally.fail(&**node, e),
                Ok(Some(Ok(other))) => tally.push(&**node, unexpected("reply", &[&other])),
                Ok(None) => tally.push(&**node, unexpected("reply", &[])),
            }
        }
        let quorum = self.voters.quorum;
        if tally.yes < quorum {
            return Err(tally.into_error("not enough nodes answered", ErrorKind::NoQuorum));
        }
        let mut live: Vec<(Vec<u8>, i64)> = Vec::new();
        for (member, _) in &all {
            if live.iter().any(|(m, _)| m == member) {
                continue;
            }
            let agreeing: Vec<i64> = all
                .iter()
                .filter(|(m, _)| m == member)
                .map(|(_, p)| *p)
                .collect();
            if agreeing.len() >= quorum {
                live.push((member.clone(), agreeing.into_iter().min().unwrap_or(0)));
            }
        }
        Ok((count, fence, live))
    }

    /// The permits of a semaphore.
    pub(crate) fn semaphore_status(&self) -> Result<SemaphoreStatus, Error> {
        let keys = &self.spec.keys;
        let (count, fence, live) = self.members(&keys.holders, keys)?;
        let holders = durations(live);
        let permits = (!holders.is_empty() && count > 0).then_some(count as u32);
        Ok(SemaphoreStatus {
            permits,
            holders,
            fence,
        })
    }

    /// The writer and readers of a read-write lock (`self` is a plan of its read side).
    pub(crate) fn rwlock_status(&self) -> Result<RwLockStatus, Error> {
        debug_assert_eq!(self.spec.kind, Kind::Read);
        let writer = self.status()?;
        let keys = &self.spec.keys;
        let (_, _, live) = self.members(&keys.readers, keys)?;
        Ok(RwLockStatus {
            writer,
            readers: durations(live),
        })
    }
}

fn durations(live: Vec<(Vec<u8>, i64)>) -> Vec<(Vec<u8>, Duration)> {
    live.into_iter()
        .map(|(m, p)| (m, Duration::from_millis(p.max(0) as u64)))
        .collect()
}
