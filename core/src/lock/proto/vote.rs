//! What one node's answer to an acquire round says, whichever form the round asked in: the
//! acquire script's one reply, or the replies to a `try_lock`'s plain commands
//! ([`super::plain`]).

use redis::Value;

use crate::lock::reply::{bytes, int};
use crate::wire::NetError;

/// One node's vote in an acquire round.
pub(crate) enum Vote<'a> {
    /// Granted, with the node's fence counter (0 when fencing is off).
    Granted(u64),
    /// Refused: taken by `holder` (empty when the node names no holder: read holds, a
    /// hand-off window, a key of another type), for `pttl_ms` as `PTTL` answers it (-1 when
    /// the round did not ask).
    Taken {
        holder: Vec<u8>,
        pttl_ms: i64,
        /// The round's token went in even so, and is to be undone (a plain acquire whose
        /// `SET` won against read holds).
        stored: bool,
    },
    /// A command failed; the round's token may have gone in before it did.
    Failed(&'a NetError),
    /// Replies that no form of the acquire gives (all of the node's, as they came).
    Unexpected(&'a [Result<Value, NetError>]),
}

impl<'a> Vote<'a> {
    /// The acquire script's reply: the fence (an integer, never negative: 0 when the lock
    /// does not fence) when granted, `{0, pttl, holder}` when not. Anything else is no grant:
    /// a negative integer is what no script returns (a server answering something else).
    pub(crate) fn of_script(reply: &'a Result<Value, NetError>) -> Vote<'a> {
        match reply {
            Ok(Value::Int(fence)) if *fence >= 0 => Vote::Granted(*fence as u64),
            Ok(Value::Array(items)) if items.len() == 3 => Vote::Taken {
                holder: bytes(&items[2]),
                pttl_ms: int(&items[1]),
                stored: false,
            },
            Err(e) => Vote::Failed(e),
            Ok(_) => Vote::Unexpected(std::slice::from_ref(reply)),
        }
    }
}
