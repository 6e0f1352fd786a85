//! The acquire of an unfenced lock's caller that has not waited and will not wait (`try_lock`,
//! and the first round of a call whose deadline has passed) as plain commands, pipelined in
//! one round trip instead of the acquire script: `SET lock token NX PX ttl`, `GET lock`,
//! `EXISTS readers`. The acquire script costs the server about twice what these commands do
//! together (the server's instruction count, each followed by a `DEL`: 52k against 26k); such
//! a caller needs no announcement as a waiter and no remaining TTL when refused, which is all
//! the script adds on its path.
//!
//! A fenced lock keeps the script: its fence counter moves only when the lock is granted
//! (so that the last fence counts grants, see `lock/scripts/fence.rs`), and no plain command can make an `INCR` depend on a `SET` that ran before it.
//! An `INCR` sent with these commands would run on refusals too and leave gaps in the fences
//! (they would still grow from grant to grant, but "last fence" would no longer count grants).
//!
//! The commands run one after another, and other clients' commands can run between them; the
//! order makes that safe:
//!
//! - **Read holds.** `EXISTS readers` runs after our `SET`. A reader's acquire script refuses
//!   while the lock key exists. So a read hold taken before our `SET` is seen by our `EXISTS`,
//!   and one attempted after it is refused: never both. When `EXISTS` finds read holds, the
//!   `SET` went in against them; the vote is "taken", with the token to be undone (the round's
//!   release, which deletes only our token). A read hold's key expires with its last hold
//!   (every script that changes the set moves its expiry to the last member's end), so
//!   `EXISTS` means a live hold.
//! - **Run twice.** When the request ran once already (the transport sends it again on a fresh
//!   connection when a pooled one turns out dead after the write), the `SET` fails on our own
//!   token: the `GET` decides, not the `SET`. Ours is a grant.
//! - **The hand-off window** (the lock key holding the empty value for waiters) fails the
//!   `SET` as it fails the script's: only callers that waited take it over.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::spec::Spec;
use super::vote::Vote;
use crate::lock::scripts::{Call, millis};
use crate::wire::{NetError, bulk};

/// The commands, in the order they run.
pub(crate) fn calls(spec: &Spec, token: &[u8], ttl: Duration) -> Vec<Call> {
    let keys = &*spec.keys;
    let packed = keys.plain();
    let slot = packed.slot;
    let ttl = millis(ttl);
    let mut set = Vec::with_capacity(packed.set.len() + token.len() + ttl.len() + 48);
    set.extend_from_slice(&packed.set);
    for word in [token, b"NX", b"PX", &ttl] {
        bulk(&mut set, word);
    }
    debug_assert!(!spec.opts.fencing, "a fenced lock acquires by its script");
    let mut calls = Vec::with_capacity(4);
    calls.push(Call::Packed { packed: set, slot });
    calls.extend(packed.after.iter().map(|packed| Call::Shared {
        packed: Arc::clone(packed),
        slot,
    }));
    calls
}

/// What the replies to [`calls`] say for the round of `token`.
pub(crate) fn vote<'a>(replies: &'a [Result<Value, NetError>], token: &[u8]) -> Vote<'a> {
    let [set, get, exists] = replies else {
        return Vote::Unexpected(replies);
    };
    // An error from the `SET` stored nothing; the round's release, which deletes only our
    // token, is sent all the same.
    if let Err(e) = set {
        return Vote::Failed(e);
    }
    let holder: &[u8] = match get {
        Ok(Value::BulkString(b)) => b,
        // Gone between the two commands, or a key of another type (`WRONGTYPE`).
        Ok(Value::Nil) | Err(_) => b"",
        Ok(_) => return Vote::Unexpected(replies),
    };
    let mine = holder == token;
    match exists {
        Ok(Value::Int(0)) if mine => Vote::Granted(0),
        Ok(Value::Int(_)) => Vote::Taken {
            holder: if mine { Vec::new() } else { holder.to_vec() },
            pttl_ms: -1,
            stored: mine,
        },
        Err(e) => Vote::Failed(e),
        Ok(_) => Vote::Unexpected(replies),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> Result<Value, NetError> {
        Err(NetError::from(redis::RedisError::from((
            redis::ErrorKind::Extension,
            "server error",
            text.to_owned(),
        ))))
    }

    const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

    /// The replies to `SET`, `GET` (`None`: nil) and `EXISTS`.
    fn replies(set_won: bool, get: Option<&str>, readers: i64) -> Vec<Result<Value, NetError>> {
        let set = if set_won { Value::Okay } else { Value::Nil };
        let get = get.map_or(Value::Nil, |g| Value::BulkString(g.as_bytes().to_vec()));
        vec![Ok(set), Ok(get), Ok(Value::Int(readers))]
    }

    fn taken(v: Vote) -> Option<(String, i64, bool)> {
        match v {
            Vote::Taken {
                holder,
                pttl_ms,
                stored,
            } => Some((String::from_utf8(holder).unwrap(), pttl_ms, stored)),
            _ => None,
        }
    }

    fn granted(v: Vote) -> bool {
        matches!(v, Vote::Granted(0))
    }

    /// What each combination of replies means, the interleavings of the module's doc among
    /// them.
    #[test]
    fn what_the_replies_say() {
        let t = "me:1:00ff";
        let me = t.as_bytes();
        // Free: granted (no fence: a fenced lock acquires by its script).
        assert!(granted(vote(&replies(true, Some(t), 0), me)));
        // Run twice: the `SET` fails on our own token.
        assert!(granted(vote(&replies(false, Some(t), 0), me)));
        // Read holds were there before our `SET`: refused, our token to be undone.
        let readers = replies(true, Some(t), 1);
        assert_eq!(taken(vote(&readers, me)), Some((String::new(), -1, true)));
        // Held by another, or kept for waiters (the hand-off window): nothing stored.
        for holder in ["them:2:aa", ""] {
            let held = replies(false, Some(holder), 0);
            assert_eq!(taken(vote(&held, me)), Some((holder.into(), -1, false)));
        }
        // Released between our `SET` and `GET`, or a key of another type.
        let gone = replies(false, None, 0);
        assert_eq!(taken(vote(&gone, me)), Some((String::new(), -1, false)));
        let mut wrongtype = replies(false, None, 0);
        wrongtype[1] = error(WRONGTYPE);
        assert_eq!(
            taken(vote(&wrongtype, me)),
            Some((String::new(), -1, false))
        );
        // A failed `SET` (a key of another type): failed, and the round's release is sent.
        let mut set_failed = replies(false, None, 0);
        set_failed[0] = error(WRONGTYPE);
        assert!(matches!(vote(&set_failed, me), Vote::Failed(_)));
        // Replies that no server gives.
        let free = replies(true, Some(t), 0);
        assert!(matches!(vote(&free[..2], me), Vote::Unexpected(_)));
        let mut odd = free.clone();
        odd[1] = Ok(Value::Int(3));
        assert!(matches!(vote(&odd, me), Vote::Unexpected(_)));
    }
}
