//! Who holds a semaphore's permits or a read-write lock, as the nodes see it.

use std::time::{Duration, Instant};

use redis::Value;

use super::scripts::SHARED_STATUS;
use crate::error::{Error, ErrorKind, NodeOutcome};
use crate::lock::acquire::Plan;
use crate::lock::proto::Kind;
use crate::lock::reply::{bytes, int};
use crate::lock::scripts::Call;
use crate::lock::tally::{Tally, unexpected};
use crate::lock::{Keys, LockStatus};
use crate::net;

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
                other => tally.push(&**node, unexpected("reply", &other)),
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
