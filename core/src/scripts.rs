//! The Lua scripts, one round trip each, and the keys they touch.
//!
//! Names and values always travel as script keys and arguments, never spliced into script
//! text, so no name can change what a script does.

use std::sync::LazyLock;

use redis::Cmd;

/// A Lua script with its SHA1, as Redis names it in EVALSHA.
pub(crate) struct Script {
    source: &'static str,
    hash: String,
}

impl Script {
    fn new(source: &'static str) -> Script {
        let hash = redis::Script::new(source).get_hash().to_owned();
        Script { source, hash }
    }

    /// The script text, for `SCRIPT LOAD` and `EVAL`.
    pub(crate) fn source(&self) -> &'static str {
        self.source
    }
}

/// Takes the lock when it is free; otherwise reports the holder and its remaining TTL.
///
/// KEYS: lock, fence, waiters, handoff. ARGV: token, ttl ms, fencing (0/1), has waited (0/1),
/// waiter announcement ms (0 = do not announce).
///
/// Returns `{1, fence}` on success, `{0, pttl, holder}` otherwise. While a release is handing
/// the lock to waiters (the `handoff` key), only callers that have already waited may take it:
/// a releaser that re-locks at once queues behind the waiters instead of starving them.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[4] == '0' and redis.call('EXISTS', KEYS[4]) == 1 then
  if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[5]) end
  return {0, redis.call('PTTL', KEYS[4]), ''}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[4])
  local fence = 0
  if ARGV[3] == '1' then fence = redis.call('INCR', KEYS[2]) end
  return {1, fence}
end
if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[5]) end
local holder = redis.pcall('GET', KEYS[1])
if type(holder) ~= 'string' then holder = '' end
return {0, redis.call('PTTL', KEYS[1]), holder}
",
    )
});

/// Deletes the lock only if it still holds our token; when waiters announced themselves (their
/// announcement outlives their longest wait), leaves one wake-up signal for one of them and a
/// short hand-off window. Without waiters, the release is a single delete.
///
/// KEYS: lock, wake, waiters, handoff. ARGV: token, wake signal ms, hand-off window ms.
/// Returns 1 released, 0 missing (expired), -1 held by another value.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('DEL', KEYS[2])
    redis.call('RPUSH', KEYS[2], '1')
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
    if tonumber(ARGV[3]) > 0 then
      redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
    end
  end
  return 1
end
if v == false then return 0 end
return -1
",
    )
});

/// Sets a new TTL only if the lock still holds our token; never re-creates a missing lock.
///
/// KEYS: lock. ARGV: token, ttl ms. Returns 1 extended, 0 missing, -1 held by another value.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v == false then return 0 end
return -1
",
    )
});

/// Raises the fence counter to at least the given value (`counter = max(counter, value)`).
///
/// KEYS: fence. ARGV: value.
pub(crate) static FENCE_MAX: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local c = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if c < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
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

/// Every script, for loading them once on each new connection.
pub(crate) fn all() -> [&'static Script; 5] {
    [&ACQUIRE, &RELEASE, &EXTEND, &FENCE_MAX, &STATUS]
}

/// One request of a round: a script invocation (sent with EVALSHA, re-sent with EVAL when the
/// server lost its scripts) or a plain command such as `WAIT`.
#[derive(Clone)]
pub(crate) enum Call {
    Script {
        script: &'static Script,
        keys: Vec<Vec<u8>>,
        args: Vec<Vec<u8>>,
    },
    Command(Cmd),
}

impl Call {
    pub(crate) fn new(script: &'static Script, keys: Vec<Vec<u8>>, args: Vec<Vec<u8>>) -> Call {
        Call::Script { script, keys, args }
    }

    /// `WAIT n timeout_ms`: blocks until every earlier write of the same connection reached
    /// `n` replicas, or the timeout passed; answers how many replicas acknowledged.
    pub(crate) fn wait(replicas: u32, timeout: std::time::Duration) -> Call {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout.as_millis().max(1) as u64);
        Call::Command(cmd)
    }

    /// The first key of a script call (it names the slot of all of them); `None` for a
    /// command.
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            Call::Script { keys, .. } => keys.first().map(Vec::as_slice),
            Call::Command(_) => None,
        }
    }

    /// Whether this is a plain command (not a script).
    pub(crate) fn is_command(&self) -> bool {
        matches!(self, Call::Command(_))
    }

    fn cmd(&self, by_hash: bool) -> Cmd {
        let (script, keys, args) = match self {
            Call::Script { script, keys, args } => (script, keys, args),
            Call::Command(cmd) => return cmd.clone(),
        };
        let mut cmd = if by_hash {
            let mut c = redis::cmd("EVALSHA");
            c.arg(script.hash.as_str());
            c
        } else {
            let mut c = redis::cmd("EVAL");
            c.arg(script.source);
            c
        };
        cmd.arg(keys.len());
        for k in keys {
            cmd.arg(k.as_slice());
        }
        for a in args {
            cmd.arg(a.as_slice());
        }
        cmd
    }

    /// The request packed for the wire (EVALSHA for a script).
    pub(crate) fn write_packed(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&self.cmd(true).get_packed_command());
    }

    /// The request again, a script with its full text (EVAL), for a server that answered
    /// NOSCRIPT.
    pub(crate) fn packed_eval(&self) -> Vec<u8> {
        self.cmd(false).get_packed_command()
    }
}
