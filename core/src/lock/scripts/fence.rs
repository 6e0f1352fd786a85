//! The scripts that hand out and raise fences: the Lua that every granting script starts
//! with, and the write-back of a fence that the granting nodes' counters disagree on.

use std::sync::LazyLock;

use super::Script;

/// The Lua functions that hand out fences, written once and put at the top of every script that
/// grants (`concat!` needs a macro, not a constant).
///
/// Fences never go back, even when a node loses its counter: a restart without persistence,
/// `FLUSHALL`, an eviction, a failover to a replica that missed the last `INCR`, a restore from
/// an older snapshot. The counter never falls below the server's `TIME` in microseconds: a
/// grant's fence is `max(counter + 1, now µs)`. Every fence handed out was at most the
/// server's time when it was handed out (unless more than one grant per microsecond ran,
/// 10^6 a second on one name), so a counter that was lost or rolled back starts again above
/// every earlier fence — as long as the server's clock has not stepped back by more than the
/// outage lasted. A counter a plain `INCR` left (an older version's) is below the time: its
/// next fence jumps up to the time, so every fence handed out before stays below. `INCR` comes
/// first, so a counter that holds no number fails the grant as it always did. A raised value
/// is written with `%d`: a Lua number is a double, exact up to 2^53 (the time in µs stays
/// below it until the year 2255), and `%d` keeps every digit where Lua's own conversion of a
/// number to a string would round it to 14.
///
/// The step is three calls (`INCR`, `TIME`, `SET`). Two would do in the common case (`TIME`,
/// then `SET … GET` of the time, putting the old value back and stepping it as here only when it
/// was not below the time), but the server spent more on that one (33.3k instructions a call
/// against 30.3k, `callgrind` over 2,000 calls on Redis 7.0): what a script's step costs is
/// mostly Lua's work on the replies (numbers parsed with `strtod`), not the count of calls.
///
/// `fence_next(key)` is a grant's fence. A read hold's fence is not a new one but the last
/// write's, as the node has it (the read script's `GET`): after the node lost its counter it
/// is 0 or an older write's until the next write, which a resource that enforces fences
/// refuses (the safe direction), and the next write's fence is above every earlier one again.
macro_rules! fence_lua {
    () => {
        r"
local function fence_next(key)
  local c = redis.call('INCR', key)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if c < floor then
    c = floor
    redis.call('SET', key, string.format('%d', c))
  end
  return c
end
"
    };
}
pub(crate) use fence_lua;

/// Raises the fence counter to at least the given value (`counter = max(counter, value)`), and
/// confirms only where no other round's earlier `INCR` can still make a later grant: the lock
/// key is empty, a hand-off's, or our token (see `proto/fence.rs` for the argument).
///
/// KEYS: fence, lock. ARGV: value, token. Returns 1 confirmed, 0 raised but not confirmed
/// (another owner's value is there).
pub(crate) static FENCE_MAX: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local c = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if c < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
local v = redis.pcall('GET', KEYS[2])
if v == false or v == '' or v == ARGV[2] then return 1 end
return 0
",
    )
});
