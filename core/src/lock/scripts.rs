//! The Lua scripts, one round trip each, and their invocations.
//!
//! Names and values always travel as script keys and arguments, never spliced into script
//! text, so no name can change what a script does. Every new connection loads the scripts
//! (`lock/calls.rs`'s `preload`); an invocation is sent by hash (`EVALSHA`) and, when the server answers that
//! it does not have the script (`NOSCRIPT`: flushed, or a restart without persistence), once
//! more with the script's text (`EVAL`) — the invocation owns that reload, as redis-rs's
//! `ScriptInvocation` does.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Value;

use super::keys::PackedKeys;
use crate::wire::{Command, Decimal, Request, array, bulk};

mod fence;
mod shared;

pub(crate) use fence::{FENCE_MAX, fence_lua};
pub(crate) use shared::{READ_ACQUIRE, SEM_ACQUIRE, SHARED_EXTEND, SHARED_RELEASE, SHARED_STATUS};

/// A Lua script with its SHA1, as Redis names it in EVALSHA.
pub struct Script {
    source: &'static str,
    /// `EVALSHA` and the hash, packed in RESP once: every invocation starts with them.
    by_hash: Vec<u8>,
}

impl Script {
    pub(crate) fn new(source: &'static str) -> Script {
        let mut by_hash = Vec::with_capacity(64);
        bulk(&mut by_hash, b"EVALSHA");
        bulk(
            &mut by_hash,
            redis::Script::new(source).get_hash().as_bytes(),
        );
        Script { source, by_hash }
    }

    /// The script text, for `SCRIPT LOAD` and `EVAL`.
    pub(crate) fn source(&self) -> &'static str {
        self.source
    }

    /// Packs an invocation: `EVALSHA hash` (`by_hash`) or `EVAL source`, then `body`.
    fn pack(&self, by_hash: bool, argc: usize, body: &[u8], buf: &mut Vec<u8>) {
        if by_hash {
            buf.reserve(8 + self.by_hash.len() + body.len());
            array(buf, 2 + argc);
            buf.extend_from_slice(&self.by_hash);
        } else {
            buf.reserve(32 + self.source.len() + body.len());
            array(buf, 2 + argc);
            bulk(buf, b"EVAL");
            bulk(buf, self.source.as_bytes());
        }
        buf.extend_from_slice(body);
    }
}

/// Takes the lock when it is free; otherwise reports the holder and its remaining TTL.
///
/// KEYS: lock, fence, readers, waiters. ARGV: token, ttl ms, fencing (0/1), has waited (0/1),
/// waiter announcement ms (0 = do not announce), waiter id. A caller that has not waited and
/// will not wait (a `try_lock`, the uncontended path) sends only the first three keys and
/// arguments (the server builds the script's tables element by element), or, when the lock
/// does not fence, plain commands instead (see `proto/plain.rs`).
///
/// The mutex is also the write side of a read-write lock on the same name: while live read
/// holds exist (the `readers` set's last-ending member ends after now), it is refused like a
/// held lock, with the longest read hold's remaining time and no holder. Without readers this
/// is one `EXISTS`; with them, `TIME` and one `ZRANGE`: expired members are left for the read
/// side's scripts to drop, which count them (a writer waiting behind readers then costs each
/// round what one waiting behind a writer does: three calls besides the announcement).
///
/// Returns the fence (an integer: 0 when fencing is off) on success, `{0, pttl, holder}`
/// otherwise (a grant's reply is no table: a table reply costs the server 1–2 µs more to
/// build and convert, measured); while a hand-off window keeps
/// the lock for waiters, `{0, the window's pttl, ''}` (no holder: the lock is free, but not
/// for this caller yet). The same round run twice (its reply was lost and the request sent
/// again on a fresh connection) finds its own token: that is its grant, with the fence the
/// counter holds (nobody else can have been granted since).
///
/// Granted at once, it does what a fenced lock must: `SET NX PX`, then the next fence (see
/// [`fence_lua`]) when fencing is on; that path comes first, before the other helper
/// functions are made (each made per call). The
/// hand-off window is the lock key itself holding the empty value (never a
/// token) for a few milliseconds after a release that had waiters: a plain `SET NX` fails on
/// it, so only callers that have already waited take it over (a releaser that re-locks at once
/// queues behind the waiters instead of starving them), and nobody pays for a hand-off check
/// when nobody waits. A caller that has waited reads the key first: the window, or a free
/// key, is its with one `SET` (a hand-off makes seven calls: read holds, `GET`, `SET`, its
/// announcement's `ZREM`, and the fence's `TIME`, `GET`, `SET`).
///
/// Waiters announce themselves in a sorted set, each under its own id with the server time
/// its announcement ends as the score; an announcement only grows (`GT`), one waiter's never
/// shortens another's, and a waiter's grant removes its own.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        fence_lua!(),
        r"
local readers = redis.call('EXISTS', KEYS[3]) == 1
if not readers and ARGV[4] ~= '1' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] == '1' then return fence_next(KEYS[2]) end
  return 0
end
local function announce(now)
  if KEYS[4] and tonumber(ARGV[5]) > 0 then
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local ends = now + tonumber(ARGV[5])
    redis.call('ZADD', KEYS[4], 'GT', ends, ARGV[6])
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[4], last[2])
  end
end
local function granted(fresh)
  if ARGV[4] == '1' then redis.call('ZREM', KEYS[4], ARGV[6]) end
  local fence = 0
  if ARGV[3] == '1' then
    if fresh then
      fence = fence_next(KEYS[2])
    else
      fence = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
    end
  end
  return fence
end
if readers then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) > now then
    announce(now)
    return {0, tonumber(last[2]) - now, ''}
  end
end
local holder
if ARGV[4] == '1' then
  holder = redis.pcall('GET', KEYS[1])
  if holder == '' or holder == false then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return granted(true)
  end
elseif readers and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return granted(true)
else
  holder = redis.pcall('GET', KEYS[1])
end
if holder == ARGV[1] then return granted(false) end
announce()
if type(holder) ~= 'string' then holder = '' end
return {0, redis.call('PTTL', KEYS[1]), holder}
",
    ))
});

/// Deletes the lock only if it still holds our token; when a waiter's announcement is live
/// (the one that ends last has not ended), leaves one wake-up signal for one of them, kept
/// until the last announcement ends (a waiter blocks no longer than that), and instead of
/// deleting the lock keeps it for the waiters for a short hand-off window (the empty value,
/// which no token is). Without waiters, the release is `GET`, `EXISTS` of the waiters, `DEL`:
/// the look at the waiters is an `EXISTS` because a call whose reply is a Lua table costs
/// the server more (a `ZRANGE` of the missing set cost 2–3 µs more per release, measured).
///
/// A release with waiters is on the hand-off's path, usually on a server that sat idle while
/// the lock was held, where every call a script makes costs many microseconds: it makes eight
/// (expired announcements are dropped by those who count them, not here). The one signal is
/// pushed onto the list, which is empty unless a signal was left unconsumed (then trimmed to
/// one), or replaced when the key holds something else.
///
/// On a Redis Cluster (ARGV 5 is `1`) the push is also announced on the list's own sharded
/// channel (`SPUBLISH`, one call more): a Cluster client's waits listen there on one
/// connection per master and then claim the signal with `LPOP` (see `net/listen.rs`).
/// Through `pcall`, so that a server without it (before Redis 7.0) or an ACL rule without it
/// runs the rest: the waits there block on the list itself.
///
/// The undo of a round made by a caller that has waited, granted here but not by a quorum,
/// also announces the caller again (ARGV 3 and 4): the grant took its announcement back, and
/// the caller still waits. Without it, readers would no longer queue behind a writer on the
/// nodes that granted its split rounds, and could keep taking a quorum of read holds there
/// while it waits.
///
/// KEYS: lock, wake, waiters. ARGV: token, hand-off window ms, and for an undo that announces
/// again: announcement ms, waiter id (both empty for a release that does not), then `1` to
/// announce the signal on a Cluster.
/// Returns 1 released, 0 missing (expired, or a hand-off our own release left: the same
/// release run twice), -1 held by another value.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if tonumber(last[2]) > now then
      local signals = redis.pcall('RPUSH', KEYS[2], '1')
      if type(signals) ~= 'number' then
        redis.call('DEL', KEYS[2])
        redis.call('RPUSH', KEYS[2], '1')
      elseif signals > 1 then
        redis.call('LTRIM', KEYS[2], -1, -1)
      end
      redis.call('PEXPIREAT', KEYS[2], last[2])
      if ARGV[5] == '1' then redis.pcall('SPUBLISH', KEYS[2], '1') end
      if tonumber(ARGV[2]) > 0 then
        redis.call('SET', KEYS[1], '', 'PX', ARGV[2])
        return 1
      end
    end
  end
  redis.call('DEL', KEYS[1])
  if ARGV[4] and ARGV[4] ~= '' then
    local t = redis.call('TIME')
    local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
    redis.call('ZADD', KEYS[3], 'GT', ends, ARGV[4])
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[3], last[2])
  end
  return 1
end
if v == false or v == '' then return 0 end
return -1
",
    )
});

/// Sets a new TTL only if the lock still holds our token; never re-creates a missing lock, and
/// never shortens an expiry: a request can arrive after its sender gave up (and after a longer
/// extension was confirmed), and Redis runs it. (`PEXPIRE … GT` would do the same from Redis
/// 7.0 on; comparing `PTTL` works on 6.2 too.)
///
/// KEYS: lock. ARGV: token, ttl ms. Returns 1 extended, 0 missing, -1 held by another value.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
if v == false or v == '' then return 0 end
return -1
",
    )
});

/// Passes on a wake-up signal that a client took off the list but has no use for: its
/// shared waiting connection popped it just after the call it was for ended (see
/// `net/hub.rs`), or it woke a call that was interrupted before its round (see
/// `lock/wait.rs`, `withdraw`). Without this, the waiters of other clients blocked behind
/// that one would learn of the release only when their own waits ran out (up to the wait
/// cap), with the lock lying free meanwhile.
///
/// It does what a release with waiters does to the list: one signal, when a waiter's
/// announcement is still live (the one that ends last), kept until it ends; nothing when
/// the list already holds one (a release since), or holds another type. A signal grants
/// nothing: whoever it wakes runs its acquire, which decides. So a signal passed on where
/// none was needed costs its waiter one round, and no two holders can follow from it.
///
/// KEYS: wake, waiters. ARGV: `1` to announce the signal on a Cluster (as `RELEASE` does).
/// Returns 1 passed on, 0 not.
pub(crate) static PASS_ON: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local last = redis.pcall('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if not last[2] or redis.pcall('LLEN', KEYS[1]) ~= 0 then return 0 end
local t = redis.call('TIME')
if tonumber(last[2]) <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 0 end
redis.call('RPUSH', KEYS[1], '1')
redis.call('PEXPIREAT', KEYS[1], last[2])
if ARGV[1] == '1' then redis.pcall('SPUBLISH', KEYS[1], '1') end
return 1
",
    )
});

/// Reports the holder's value, its PTTL and the last fence number.
///
/// KEYS: lock, fence. Returns `{holder or '', pttl, fence}`.
pub(crate) static STATUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then holder = '' end
return {holder, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
",
    )
});

/// About how many bytes `words` take packed as RESP bulk strings.
fn packed_len(words: &[&[u8]]) -> usize {
    words.iter().map(|w| w.len() + 16).sum()
}

/// A duration in whole milliseconds, as a script argument.
pub(crate) fn millis(d: Duration) -> Decimal {
    Decimal::new(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A round's requests that send `call` to the nodes `to` and nothing to the other nodes of
/// `n`.
pub(crate) fn only_to<'a>(n: usize, to: &[usize], call: &'a Call) -> Vec<&'a [Call]> {
    let mut calls: Vec<&[Call]> = vec![&[]; n];
    for &i in to {
        calls[i] = std::slice::from_ref(call);
    }
    calls
}

/// One request of a round: a script invocation, or a plain command such as `WAIT`.
pub enum Call {
    /// A plain command packed in RESP for one round (a `try_lock`'s `SET`), about a key in
    /// `slot`.
    Packed {
        /// The command, packed.
        packed: Vec<u8>,
        /// Its key's cluster slot.
        slot: Option<u16>,
    },
    /// A plain command packed in RESP once for every round of a lock (a `try_lock`'s
    /// commands after its `SET`).
    Shared {
        /// The command, packed.
        packed: Arc<[u8]>,
        /// Its key's cluster slot.
        slot: Option<u16>,
    },
    /// A script invocation: by hash, or by its text after a `NOSCRIPT`.
    Script {
        /// The script.
        script: &'static Script,
        /// How many keys and arguments follow the script.
        argc: usize,
        /// `numkeys`, the keys and the arguments, packed in RESP once: the same bytes follow
        /// `EVALSHA sha` on every node, or `EVAL source` after a NOSCRIPT.
        body: Vec<u8>,
        /// The first key's cluster slot (all of a call's keys share it).
        slot: Option<u16>,
    },
    /// Any other plain command.
    Command(Command),
}

impl Call {
    pub(crate) fn new(script: &'static Script, keys: &[&[u8]], args: &[&[u8]]) -> Call {
        let mut body = Vec::with_capacity(8 + packed_len(keys) + packed_len(args));
        let slot = PackedKeys::pack(&mut body, keys);
        Call::script(script, body, keys.len(), slot, args)
    }

    /// A call of `script` on keys packed beforehand.
    pub(crate) fn with_keys(script: &'static Script, keys: &PackedKeys, args: &[&[u8]]) -> Call {
        let mut body = Vec::with_capacity(keys.packed.len() + packed_len(args));
        body.extend_from_slice(&keys.packed);
        Call::script(script, body, keys.count, keys.slot, args)
    }

    /// A script call whose `body` holds `numkeys` and `keys` keys: appends the arguments.
    fn script(
        script: &'static Script,
        mut body: Vec<u8>,
        keys: usize,
        slot: Option<u16>,
        args: &[&[u8]],
    ) -> Call {
        for a in args {
            bulk(&mut body, a);
        }
        Call::Script {
            script,
            argc: 1 + keys + args.len(),
            body,
            slot,
        }
    }

    /// `WAIT n timeout_ms`: blocks until every earlier write of the same connection reached
    /// `n` replicas, or the timeout passed; answers how many replicas acknowledged.
    pub(crate) fn wait(replicas: u32, timeout: std::time::Duration) -> Call {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout.as_millis().max(1) as u64);
        Call::Command(Command::new(cmd))
    }
}

impl Request for Call {
    fn write(&self, buf: &mut Vec<u8>) {
        match self {
            Call::Script {
                script, argc, body, ..
            } => script.pack(true, *argc, body, buf),
            Call::Packed { packed, .. } => buf.extend_from_slice(packed),
            Call::Shared { packed, .. } => buf.extend_from_slice(packed),
            Call::Command(cmd) => cmd.write(buf),
        }
    }

    fn slot(&self) -> Option<u16> {
        match self {
            Call::Script { slot, .. } | Call::Packed { slot, .. } | Call::Shared { slot, .. } => {
                *slot
            }
            Call::Command(cmd) => cmd.slot(),
        }
    }

    fn resend(&self, reply: &Value) -> Option<Vec<u8>> {
        let Call::Script {
            script, argc, body, ..
        } = self
        else {
            return None;
        };
        if !matches!(reply, Value::ServerError(e) if e.code() == "NOSCRIPT") {
            return None;
        }
        let mut buf = Vec::new();
        script.pack(false, *argc, body, &mut buf);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::key_slot;

    /// The hand-packed requests are byte for byte what redis-rs packs.
    #[test]
    fn calls_pack_like_redis_rs() {
        let keys: [&[u8]; 2] = [b"lock", b"{lock}:fence"];
        let long = vec![b'x'; 300];
        let args: [&[u8]; 3] = [b"token", b"", &long];
        let call = Call::new(&RELEASE, &keys, &args);
        let noscript = redis::parse_redis_value(b"-NOSCRIPT No matching script.\r\n").unwrap();
        for by_hash in [true, false] {
            let mut expected = if by_hash {
                let mut c = redis::cmd("EVALSHA");
                c.arg(redis::Script::new(RELEASE.source()).get_hash());
                c
            } else {
                let mut c = redis::cmd("EVAL");
                c.arg(RELEASE.source());
                c
            };
            expected.arg(keys.len()).arg(&keys[..]).arg(&args[..]);
            let packed = if by_hash {
                let mut buf = b"prefix".to_vec();
                call.write(&mut buf);
                buf.split_off(6)
            } else {
                call.resend(&noscript).expect("NOSCRIPT asks for the text")
            };
            assert_eq!(packed, expected.get_packed_command(), "by_hash {by_hash}");
        }
        assert_eq!(call.resend(&Value::Int(1)), None);
        assert_eq!(call.slot(), Some(key_slot(b"lock")));
        let wait = Call::wait(1, std::time::Duration::from_millis(5));
        assert_eq!(wait.slot(), None);
        assert_eq!(wait.resend(&noscript), None);
    }
}
