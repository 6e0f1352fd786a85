//! The acquire of a caller that has not waited and will not wait (`try_lock`, and the first
//! round of a call whose deadline has passed) as plain commands, pipelined in one round trip
//! instead of the acquire script: `SET lock token NX PX ttl`, `GET lock`, `EXISTS readers`,
//! and `INCR fence` when fencing is on. The acquire script costs the server about twice what
//! these commands do together (the server's instruction count, each followed by a `DEL`: 52k
//! against 26k); such a caller needs no announcement as a waiter and no remaining TTL when
//! refused, which is all the script adds on its path.
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
//! - **Fences.** `INCR` runs whether or not the `SET` won: a refused `try_lock` moves the
//!   counter on. Fences only need to grow from grant to grant, and every grant's `INCR` comes
//!   after every earlier grant's, so they still do; a gap says nothing.
//! - **The hand-off window** (the lock key holding the empty value for waiters) fails the
//!   `SET` as it fails the script's: only callers that waited take it over.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::Spec;
use super::vote::Vote;
use crate::lock::scripts::{Call, millis};
use crate::net::{NetError, bulk};

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
    let after = &packed.after[..if spec.opts.fencing { 3 } else { 2 }];
    let mut calls = Vec::with_capacity(5);
    calls.push(Call::Packed { packed: set, slot });
    calls.extend(after.iter().map(|packed| Call::Shared {
        packed: Arc::clone(packed),
        slot,
    }));
    calls
}

/// What the replies to [`calls`] say for the round of `token`.
pub(crate) fn vote<'a>(replies: &'a [Result<Value, NetError>], token: &[u8]) -> Vote<'a> {
    let [set, get, exists, fence @ ..] = replies else {
        return Vote::Unexpected(replies);
    };
    // An error from the `SET` stored nothing; one from `INCR` may follow a `SET` that won.
    // Either way the round's release, which deletes only our token, is sent.
    if let Some(Err(e)) = std::iter::once(set).chain(fence).find(|r| r.is_err()) {
        return Vote::Failed(e);
    }
    let holder: &[u8] = match get {
        Ok(Value::BulkString(b)) => b,
        // Gone between the two commands, or a key of another type (`WRONGTYPE`).
        Ok(Value::Nil) | Err(_) => b"",
        Ok(_) => return Vote::Unexpected(replies),
    };
    let fence = match fence {
        [] => 0,
        [Ok(Value::Int(f))] => (*f).max(0) as u64,
        _ => return Vote::Unexpected(replies),
    };
    let mine = holder == token;
    match exists {
        Ok(Value::Int(0)) if mine => Vote::Granted(fence),
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

    /// The replies to `SET`, `GET` (`None`: nil), `EXISTS` and, with a fence, `INCR`.
    fn replies(
        set_won: bool,
        get: Option<&str>,
        readers: i64,
        fence: Option<i64>,
    ) -> Vec<Result<Value, NetError>> {
        let set = if set_won { Value::Okay } else { Value::Nil };
        let get = get.map_or(Value::Nil, |g| Value::BulkString(g.as_bytes().to_vec()));
        let mut r = vec![Ok(set), Ok(get), Ok(Value::Int(readers))];
        r.extend(fence.map(|f| Ok(Value::Int(f))));
        r
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

    fn granted(v: Vote) -> Option<u64> {
        match v {
            Vote::Granted(f) => Some(f),
            _ => None,
        }
    }

    /// What each combination of replies means, the interleavings of the module's doc among
    /// them.
    #[test]
    fn what_the_replies_say() {
        let t = "me:1:00ff";
        let me = t.as_bytes();
        // Free: granted with the counter, or 0 without fencing.
        assert_eq!(
            granted(vote(&replies(true, Some(t), 0, Some(7)), me)),
            Some(7)
        );
        assert_eq!(granted(vote(&replies(true, Some(t), 0, None), me)), Some(0));
        // Run twice: the `SET` fails on our own token.
        assert_eq!(
            granted(vote(&replies(false, Some(t), 0, Some(8)), me)),
            Some(8)
        );
        // Read holds were there before our `SET`: refused, our token to be undone.
        let readers = replies(true, Some(t), 1, Some(9));
        assert_eq!(taken(vote(&readers, me)), Some((String::new(), -1, true)));
        // Held by another, or kept for waiters (the hand-off window): nothing stored.
        for holder in ["them:2:aa", ""] {
            let held = replies(false, Some(holder), 0, Some(9));
            assert_eq!(taken(vote(&held, me)), Some((holder.into(), -1, false)));
        }
        // Released between our `SET` and `GET`, or a key of another type.
        let gone = replies(false, None, 0, Some(9));
        assert_eq!(taken(vote(&gone, me)), Some((String::new(), -1, false)));
        let mut wrongtype = replies(false, None, 0, None);
        wrongtype[1] = error(WRONGTYPE);
        assert_eq!(
            taken(vote(&wrongtype, me)),
            Some((String::new(), -1, false))
        );
        // A failed `INCR` after a `SET` that won: failed, so that the round undoes it.
        let mut fence_failed = replies(true, Some(t), 0, Some(0));
        fence_failed[3] = error(WRONGTYPE);
        assert!(matches!(vote(&fence_failed, me), Vote::Failed(_)));
        // Replies that no server gives.
        let free = replies(true, Some(t), 0, Some(7));
        assert!(matches!(vote(&free[..2], me), Vote::Unexpected(_)));
        let mut odd = free.clone();
        odd[1] = Ok(Value::Int(3));
        assert!(matches!(vote(&odd, me), Vote::Unexpected(_)));
    }
}
