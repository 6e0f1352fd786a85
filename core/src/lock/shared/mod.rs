//! Leases other than the mutex's: a counting semaphore's permits and a read-write lock's read
//! holds. They are leases like the mutex's (token, fence, validity, renewal by the renew
//! thread, loss, release with a wake-up), run by the same machines and drivers; what differs
//! is the scripts, chosen here by the lock's [`Kind`]. The write side of a read-write lock is
//! the mutex itself.

mod scripts;
mod status;

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::acquire::Plan;
use super::proto::{Kind, Spec};
use super::scripts::{self as mutex_scripts, Call, Script, millis};
use super::voters::Voters;
use super::{Keys, reply::int};
use crate::error::Error;
use crate::net::Answer;
use crate::options::{MAX_PERMITS, MutexOptions};

pub use status::{RwLockStatus, SemaphoreStatus};

/// Every script, the mutex's and this module's, loaded once on each new connection.
pub(crate) fn preload() -> Arc<[redis::Cmd]> {
    let ours = scripts().into_iter().map(|s| {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(s.source());
        cmd
    });
    mutex_scripts::preload()
        .iter()
        .cloned()
        .chain(ours)
        .collect()
}

/// Every script with its name, the mutex's first, for the simulator.
pub(crate) fn named() -> Vec<(&'static str, &'static str)> {
    let mut all = mutex_scripts::named();
    all.extend([
        ("sem_acquire", scripts::SEM_ACQUIRE.source()),
        ("read_acquire", scripts::READ_ACQUIRE.source()),
        ("shared_extend", scripts::SHARED_EXTEND.source()),
        ("shared_release", scripts::SHARED_RELEASE.source()),
        ("shared_status", scripts::SHARED_STATUS.source()),
    ]);
    all
}

fn scripts() -> [&'static Script; 5] {
    [
        &scripts::SEM_ACQUIRE,
        &scripts::READ_ACQUIRE,
        &scripts::SHARED_EXTEND,
        &scripts::SHARED_RELEASE,
        &scripts::SHARED_STATUS,
    ]
}

/// The acquire script call of a lease other than the mutex's (`None` for the mutex, whose
/// call the round makes itself). Arguments as for the mutex's acquire.
pub(crate) fn acquire_call(
    spec: &Spec,
    token: &[u8],
    waited: bool,
    announce: Duration,
    waiter: &[u8],
) -> Option<Call> {
    let (opts, keys) = (&spec.opts, &spec.keys);
    let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
    let ttl = millis(spec.grant_ttl());
    let common: [&[u8]; 6] = [
        token,
        &ttl,
        flag(opts.fencing),
        flag(waited),
        &millis(announce),
        waiter,
    ];
    match spec.kind {
        Kind::Mutex => None,
        Kind::Semaphore(permits) => {
            let permits = permits.to_string();
            let mut args = common.to_vec();
            args.push(permits.as_bytes());
            Some(Call::new(
                &scripts::SEM_ACQUIRE,
                &[&keys.holders, &keys.permits, &keys.fence, &keys.waiters],
                &args,
            ))
        }
        Kind::Read => Some(Call::new(
            &scripts::READ_ACQUIRE,
            &[
                &keys.lock,
                &keys.fence,
                &keys.waiters,
                &keys.readq,
                &keys.readers,
                &keys.wake,
            ],
            &common,
        )),
    }
}

/// The release script call for one lease and token. `handoff`: a real release (it may open
/// the hand-off window for waiters); a failed attempt's clean-up does not.
pub(crate) fn release_call(spec: &Spec, token: &[u8], handoff: bool) -> Call {
    let (opts, keys) = (&spec.opts, &spec.keys);
    let window = if handoff {
        opts.handoff_window.min(opts.ttl)
    } else {
        Duration::ZERO
    };
    match spec.kind {
        Kind::Mutex => mutex_scripts::release_call(keys, token, opts, handoff),
        // Fairness among a semaphore's waiters comes from the permits kept for them, not a
        // window.
        Kind::Semaphore(_) => Call::new(
            &scripts::SHARED_RELEASE,
            &[
                &keys.holders,
                &keys.wake,
                &keys.waiters,
                &keys.lock,
                &keys.permits,
            ],
            &[token, b"0", b"0"],
        ),
        Kind::Read => Call::new(
            &scripts::SHARED_RELEASE,
            &[&keys.readers, &keys.wake, &keys.waiters, &keys.lock],
            &[token, &millis(window), b"1"],
        ),
    }
}

/// The extension of one lease to `ttl` from now.
pub(crate) fn extend_call(spec: &Spec, token: &[u8], ttl: Duration) -> Call {
    let keys = &spec.keys;
    match spec.kind {
        Kind::Mutex => Call::new(
            &mutex_scripts::EXTEND,
            &[&keys.lock],
            &[token, &millis(ttl)],
        ),
        Kind::Semaphore(_) => Call::new(
            &scripts::SHARED_EXTEND,
            &[&keys.holders, &keys.permits],
            &[token, &millis(ttl)],
        ),
        Kind::Read => Call::new(
            &scripts::SHARED_EXTEND,
            &[&keys.readers],
            &[token, &millis(ttl)],
        ),
    }
}

/// An answer to an acquire round that ends the call with an error instead of a vote: a
/// semaphore whose live permits were taken with another count. Nothing was stored.
pub(crate) fn refusal(spec: &Spec, answers: &[Answer]) -> Result<(), Error> {
    let Kind::Semaphore(asked) = spec.kind else {
        return Ok(());
    };
    for answer in answers {
        if let Ok(values) = answer
            && let Some(Ok(Value::Array(items))) = values.first()
            && items.len() == 2
            && int(&items[0]) == -1
        {
            let stored = int(&items[1]);
            return Err(Error::invalid(format!(
                "the semaphore {:?} is held with {stored} permits, but this call asked for \
                 {asked}; every user of one name must give the same count",
                String::from_utf8_lossy(&spec.keys.lock)
            )));
        }
    }
    Ok(())
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
