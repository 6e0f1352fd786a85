//! Who holds a lock, for how long, and its last fence, as a quorum of nodes sees it.

use std::time::{Duration, Instant};

use redis::Value;

use super::acquire::Plan;
use super::reply::{bytes, int};
use super::scripts::{self, Call};
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
                other => tally.push(&**node, unexpected("reply", &other)),
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
