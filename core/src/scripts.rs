//! The Lua scripts, one round trip each, and the keys they touch.
//!
//! Names and values always travel as script keys and arguments, never spliced into script
//! text, so no name can change what a script does.

use std::sync::LazyLock;

use redis::Cmd;

use crate::keys::key_slot;

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
/// a releaser that re-locks at once queues behind the waiters instead of starving them. A
/// waiter's grant ends the window; a caller that has not waited only gets that far when there
/// is none, and is spared the delete (every call a script makes costs server time).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if ARGV[4] == '0' and redis.call('EXISTS', KEYS[4]) == 1 then
  if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[5]) end
  return {0, redis.call('PTTL', KEYS[4]), ''}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[4] == '1' then redis.call('DEL', KEYS[4]) end
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

/// Every script with its name, for the simulator.
pub(crate) fn named() -> Vec<(&'static str, &'static str)> {
    vec![
        ("acquire", ACQUIRE.source()),
        ("release", RELEASE.source()),
        ("extend", EXTEND.source()),
        ("fence_max", FENCE_MAX.source()),
        ("status", STATUS.source()),
    ]
}

/// One request of a round: a script invocation (sent with EVALSHA, re-sent with EVAL when the
/// server lost its scripts) or a plain command such as `WAIT`.
#[derive(Clone)]
pub(crate) enum Call {
    Script {
        script: &'static Script,
        /// How many keys and arguments follow the script.
        argc: usize,
        /// `numkeys`, the keys and the arguments, packed in RESP once: the same bytes follow
        /// `EVALSHA sha` on every node, or `EVAL source` after a NOSCRIPT.
        body: Vec<u8>,
        /// The first key's cluster slot (all of a call's keys share it).
        slot: Option<u16>,
    },
    Command(Cmd),
}

impl Call {
    pub(crate) fn new(script: &'static Script, keys: &[&[u8]], args: &[&[u8]]) -> Call {
        let mut body =
            Vec::with_capacity(32 + keys.iter().chain(args).map(|a| a.len() + 16).sum::<usize>());
        bulk(&mut body, &Decimal::new(keys.len() as u64));
        for a in keys.iter().chain(args) {
            bulk(&mut body, a);
        }
        Call::Script {
            script,
            argc: 1 + keys.len() + args.len(),
            body,
            slot: keys.first().map(|k| key_slot(k)),
        }
    }

    /// `WAIT n timeout_ms`: blocks until every earlier write of the same connection reached
    /// `n` replicas, or the timeout passed; answers how many replicas acknowledged.
    pub(crate) fn wait(replicas: u32, timeout: std::time::Duration) -> Call {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout.as_millis().max(1) as u64);
        Call::Command(cmd)
    }

    /// The cluster slot of a script call's keys; `None` for a command.
    pub(crate) fn slot(&self) -> Option<u16> {
        match self {
            Call::Script { slot, .. } => *slot,
            Call::Command(_) => None,
        }
    }

    /// Whether this is a plain command (not a script).
    pub(crate) fn is_command(&self) -> bool {
        matches!(self, Call::Command(_))
    }

    /// Packs the request for the wire: `EVALSHA` (`by_hash`) or `EVAL` for a script.
    fn pack(&self, by_hash: bool, buf: &mut Vec<u8>) {
        let (script, argc, body) = match self {
            Call::Script {
                script, argc, body, ..
            } => (script, argc, body),
            Call::Command(cmd) => return cmd.write_packed_command(buf),
        };
        let head = if by_hash {
            script.hash.len()
        } else {
            script.source.len()
        };
        buf.reserve(32 + head + body.len());
        buf.push(b'*');
        decimal(buf, 2 + argc);
        buf.extend_from_slice(b"\r\n");
        if by_hash {
            bulk(buf, b"EVALSHA");
            bulk(buf, script.hash.as_bytes());
        } else {
            bulk(buf, b"EVAL");
            bulk(buf, script.source.as_bytes());
        }
        buf.extend_from_slice(body);
    }

    /// The request packed for the wire (EVALSHA for a script).
    pub(crate) fn write_packed(&self, buf: &mut Vec<u8>) {
        self.pack(true, buf);
    }

    /// The request again, a script with its full text (EVAL), for a server that answered
    /// NOSCRIPT.
    pub(crate) fn packed_eval(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        self.pack(false, &mut buf);
        buf
    }
}

/// Appends one RESP bulk string.
fn bulk(buf: &mut Vec<u8>, data: &[u8]) {
    buf.push(b'$');
    decimal(buf, data.len());
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
fn decimal(buf: &mut Vec<u8>, n: usize) {
    buf.extend_from_slice(&Decimal::new(n as u64));
}

/// A number's decimal digits, on the stack: the requests of every round carry a few.
pub(crate) struct Decimal {
    digits: [u8; 20],
    at: usize,
}

impl Decimal {
    pub(crate) fn new(mut n: u64) -> Decimal {
        let mut d = Decimal {
            digits: [0; 20],
            at: 20,
        };
        loop {
            d.at -= 1;
            d.digits[d.at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return d;
            }
        }
    }
}

impl std::ops::Deref for Decimal {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.digits[self.at..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_the_numbers_digits() {
        for n in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            assert_eq!(&*Decimal::new(n), n.to_string().as_bytes());
        }
    }

    /// The hand-packed requests are byte for byte what redis-rs packs.
    #[test]
    fn calls_pack_like_redis_rs() {
        let keys: [&[u8]; 2] = [b"lock", b"{lock}:fence"];
        let long = vec![b'x'; 300];
        let args: [&[u8]; 3] = [b"token", b"", &long];
        let call = Call::new(&RELEASE, &keys, &args);
        for by_hash in [true, false] {
            let mut expected = if by_hash {
                let mut c = redis::cmd("EVALSHA");
                c.arg(RELEASE.hash.as_str());
                c
            } else {
                let mut c = redis::cmd("EVAL");
                c.arg(RELEASE.source());
                c
            };
            expected.arg(keys.len()).arg(&keys[..]).arg(&args[..]);
            let packed = if by_hash {
                let mut buf = b"prefix".to_vec();
                call.write_packed(&mut buf);
                buf.split_off(6)
            } else {
                call.packed_eval()
            };
            assert_eq!(packed, expected.get_packed_command(), "by_hash {by_hash}");
        }
        assert_eq!(call.slot(), Some(key_slot(b"lock")));
        assert_eq!(
            Call::wait(1, std::time::Duration::from_millis(5)).slot(),
            None
        );
    }
}
