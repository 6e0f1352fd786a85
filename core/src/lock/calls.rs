//! The calls of every lock kind, side by side: which script each kind runs to acquire,
//! extend, release and undo, with which keys and arguments. Pure builders: nothing here sends
//! a request or keeps state. The scripts themselves are in `scripts.rs` (the mutex's, the
//! fence's) and `scripts/shared.rs` (a semaphore's permits and a read-write lock's read
//! holds, the leases that share a name). The mutex's acquire is built by its round
//! (`proto/round.rs`), which also has a plain-command form of it (`proto/plain.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::proto::{Kind, Spec};
use super::reply::int;
use super::scripts::{
    ACQUIRE, Call, EXTEND, FENCE_MAX, PASS_ON, READ_ACQUIRE, RELEASE, SEM_ACQUIRE, SHARED_EXTEND,
    SHARED_RELEASE, SHARED_STATUS, STATUS, Script, millis,
};
use crate::error::Error;
use crate::net::key_slot;
use crate::wire::{Answer, Command};

/// Every script, loaded once on each new connection.
pub(crate) fn preload() -> Arc<[redis::Cmd]> {
    named()
        .into_iter()
        .map(|(_, source)| {
            let mut cmd = redis::cmd("SCRIPT");
            cmd.arg("LOAD").arg(source);
            cmd
        })
        .collect()
}

/// Every script with its name, the mutex's first, for the simulator.
pub fn named() -> Vec<(&'static str, &'static str)> {
    let all: [(&str, &Script); 11] = [
        ("acquire", &ACQUIRE),
        ("release", &RELEASE),
        ("extend", &EXTEND),
        ("fence_max", &FENCE_MAX),
        ("status", &STATUS),
        ("sem_acquire", &SEM_ACQUIRE),
        ("read_acquire", &READ_ACQUIRE),
        ("shared_extend", &SHARED_EXTEND),
        ("shared_release", &SHARED_RELEASE),
        ("shared_status", &SHARED_STATUS),
        ("pass_on", &PASS_ON),
    ];
    all.into_iter().map(|(n, s)| (n, s.source())).collect()
}

/// The call that passes on a wake-up signal of `spec`'s list that a client popped with no
/// wait left to take it (see `PASS_ON`).
pub(crate) fn pass_on_call(spec: &Spec) -> Call {
    let keys = &spec.keys;
    let announce: &[u8] = if spec.announce { b"1" } else { b"0" };
    Call::new(&PASS_ON, &[&keys.wake, &keys.waiters], &[announce])
}

/// The acquire script call of a lease other than the mutex's (`None` for the mutex, whose
/// call the round makes itself). Arguments as for the mutex's acquire; a read lock's also
/// says whether the call's last wait was `woken` by a wake-up signal.
pub(crate) fn acquire_call(
    spec: &Spec,
    token: &[u8],
    (waited, woken): (bool, bool),
    announce: Duration,
    waiter: &[u8],
) -> Option<Call> {
    let (opts, keys) = (&spec.opts, &spec.keys);
    let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
    let ttl = millis(spec.grant_ttl());
    let waited = match spec.kind {
        Kind::Read if waited && woken => &b"2"[..],
        _ => flag(waited),
    };
    // A read lock's last argument says to announce a wake-up it passes on (a Cluster).
    let args: [&[u8]; 7] = [
        token,
        &ttl,
        flag(opts.fencing),
        waited,
        &millis(announce),
        waiter,
        b"1",
    ];
    let common = &args[..6];
    match spec.kind {
        Kind::Mutex => None,
        Kind::Semaphore(permits) => {
            let permits = permits.to_string();
            let mut with_permits = common.to_vec();
            with_permits.push(permits.as_bytes());
            Some(Call::new(
                &SEM_ACQUIRE,
                &[&keys.holders, &keys.permits, &keys.fence, &keys.waiters],
                &with_permits,
            ))
        }
        Kind::Read => Some(Call::new(
            &READ_ACQUIRE,
            &[
                &keys.lock,
                &keys.fence,
                &keys.waiters,
                &keys.readq,
                &keys.readers,
                &keys.wake,
            ],
            announcing(spec, &args, 6),
        )),
    }
}

/// The release script call for one lease and token. `handoff`: a real release (it may open
/// the hand-off window for waiters); a failed attempt's clean-up does not.
pub fn release_call(spec: &Spec, token: &[u8], handoff: bool) -> Call {
    let (opts, keys) = (&spec.opts, &spec.keys);
    let window = if handoff {
        opts.handoff_window.min(opts.ttl)
    } else {
        Duration::ZERO
    };
    let window = millis(window);
    match spec.kind {
        // The announcement flag comes after the two (empty) arguments of an undo's rejoin.
        Kind::Mutex => Call::with_keys(
            &RELEASE,
            keys.release_keys(),
            announcing(spec, &[token, &window, b"", b"", b"1"], 2),
        ),
        // Fairness among a semaphore's waiters comes from the permits kept for them, not a
        // window.
        Kind::Semaphore(_) => Call::new(
            &SHARED_RELEASE,
            &[
                &keys.holders,
                &keys.wake,
                &keys.waiters,
                &keys.lock,
                &keys.permits,
            ],
            announcing(spec, &[token, b"0", b"0", b"1"], 3),
        ),
        Kind::Read => Call::new(
            &SHARED_RELEASE,
            &[&keys.readers, &keys.wake, &keys.waiters, &keys.lock],
            announcing(spec, &[token, &window, b"1", b"1"], 3),
        ),
    }
}

/// The undo of a waited round that announces its waiter again where it undoes a grant (see
/// [`RELEASE`]): `rejoin` is the announcement's length and the waiter id.
pub(crate) fn undo_call(spec: &Spec, token: &[u8], rejoin: (Duration, &[u8])) -> Call {
    let (announce, waiter) = rejoin;
    let args: &[&[u8]] = &[token, b"0", &millis(announce), waiter, b"1"];
    Call::with_keys(
        &RELEASE,
        spec.keys.release_keys(),
        announcing(spec, args, 4),
    )
}

/// A script's arguments: all of `args`, whose last asks the script to announce the wake-up
/// signal it pushes (on a Cluster, see `Spec::announce`), or only the first `without`.
fn announcing<'a, 'b>(spec: &Spec, args: &'b [&'a [u8]], without: usize) -> &'b [&'a [u8]] {
    match spec.announce {
        true => args,
        false => &args[..without],
    }
}

/// The extension of one lease to `ttl` from now.
pub fn extend_call(spec: &Spec, token: &[u8], ttl: Duration) -> Call {
    let keys = &spec.keys;
    match spec.kind {
        Kind::Mutex => Call::new(&EXTEND, &[&keys.lock], &[token, &millis(ttl)]),
        Kind::Semaphore(_) => Call::new(
            &SHARED_EXTEND,
            &[&keys.holders, &keys.permits],
            &[token, &millis(ttl)],
        ),
        Kind::Read => Call::new(&SHARED_EXTEND, &[&keys.readers], &[token, &millis(ttl)]),
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

/// The `ZREM`s that take the waiter announcement `id` back: from the waiters, and from the
/// waiting readers for a read hold.
pub fn withdraw_calls(spec: &Spec, id: &[u8]) -> Vec<Call> {
    let keys = &spec.keys;
    let mut lists = vec![&keys.waiters];
    if spec.kind == Kind::Read {
        lists.push(&keys.readq);
    }
    lists
        .into_iter()
        .map(|list| {
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(list.as_slice()).arg(id);
            Call::Command(Command::keyed(zrem, key_slot(list)))
        })
        .collect()
}
