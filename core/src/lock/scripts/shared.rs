//! The Lua scripts of the leases that share a name: a semaphore's permits and a read-write
//! lock's read holds. Both keep their holders in a sorted set of tokens scored by when each
//! hold ends, in server time (`TIME`, ms), and drop expired members before they count, so a
//! holder that died gives its place back once its TTL ran out.

use std::sync::LazyLock;

use super::{Script, fence_lua};

/// Takes one of a semaphore's permits when one is free.
///
/// KEYS: holders, permits, fence, waiters. ARGV: token, ttl ms, fencing (0/1), has waited
/// (0/1), waiter announcement ms (0 = do not announce), waiter id, permit count.
///
/// Returns the fence (an integer, like the mutex's acquire) on success; `{0, ms until the
/// first permit expires (-1: unknown), ''}` when none is free (announcing the caller as a waiter, like the mutex); `{-1, count}` when
/// live permits were taken with another count (nothing changed). The count is stored while
/// any permit is held and goes with the last one. Permits that announced waiters may be
/// waiting for are kept for them: a caller that has not waited only takes a permit beyond
/// those, so a releaser that re-acquires at once queues behind the waiters. The same round run
/// twice finds its own member: that is its grant.
pub(crate) static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        fence_lua!(),
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
local n = redis.call('GET', KEYS[2])
if held > 0 and n and n ~= ARGV[7] then return {-1, tonumber(n) or 0} end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local fence = 0
  if ARGV[3] == '1' then fence = tonumber(redis.call('GET', KEYS[3]) or '0') or 0 end
  return fence
end
local free = tonumber(ARGV[7]) - held
if free > 0 and ARGV[4] == '0' and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  free = free - redis.call('ZCARD', KEYS[4])
end
if free > 0 then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('SET', KEYS[2], ARGV[7])
  redis.call('PEXPIREAT', KEYS[1], last[2])
  redis.call('PEXPIREAT', KEYS[2], last[2])
  if ARGV[4] == '1' then redis.call('ZREM', KEYS[4], ARGV[6]) end
  local fence = 0
  if ARGV[3] == '1' then fence = fence_next(KEYS[3]) end
  return fence
end
if tonumber(ARGV[5]) > 0 then
  redis.call('ZADD', KEYS[4], 'GT', now + tonumber(ARGV[5]), ARGV[6])
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[4], last[2])
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then return {0, tonumber(first[2]) - now, ''} end
return {0, -1, ''}
",
    ))
});

/// Takes a read hold of a read-write lock.
///
/// KEYS: lock, fence, waiters, readq, readers, wake. ARGV: token, ttl ms, fencing (0/1), has
/// waited (0: no; 1: yes, and its last wait ran out or is not known to have been woken; 2:
/// yes, and its last wait on this node was woken by a wake-up signal), waiter announcement ms
/// (0 = do not announce), waiter id, and `1` to announce a wake-up passed on (a Cluster).
///
/// Refused (`{0, pttl, holder}`, like the mutex's acquire) while the lock key exists (a
/// writer, a mutex or any `SET NX` holder), during a release's hand-off window (the lock key's
/// empty value) to callers that have not waited, and while a writer waits: announced waiters that are not readers (a
/// waiting reader is announced in `waiters` and in `readq`, so a writer's release wakes it,
/// and writers are the members of `waiters` not in `readq`). A waiting reader never holds a
/// writer up. A reader that was woken by a wake-up and must still yield to a waiting writer
/// passes it on (it may have taken the writer's); one whose wait ran out creates none (a
/// release does: otherwise waiting readers wake each other in a storm while nothing is
/// released). Granted: the fence counter's current value (the last write it may observe; not
/// incremented), and a waiter's grant passes one wake-up on to the next waiting reader. With
/// ARGV 7 `1` (a Cluster) a wake-up passed on is also announced, as `RELEASE` announces one.
pub(crate) static READ_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function wake_one()
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] and redis.call('LLEN', KEYS[6]) == 0 then
    redis.call('RPUSH', KEYS[6], '1')
    redis.call('PEXPIREAT', KEYS[6], last[2])
    if ARGV[7] == '1' then redis.pcall('SPUBLISH', KEYS[6], '1') end
  end
end
local function refuse(pttl, holder)
  if tonumber(ARGV[5]) > 0 then
    local ends = now + tonumber(ARGV[5])
    redis.call('ZADD', KEYS[3], 'GT', ends, ARGV[6])
    redis.call('ZADD', KEYS[4], 'GT', ends, ARGV[6])
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[3], last[2])
    redis.call('PEXPIREAT', KEYS[4], last[2])
  end
  return {0, pttl, holder}
end
local holder = redis.pcall('GET', KEYS[1])
if holder and not (holder == '' and ARGV[4] ~= '0') then
  if type(holder) ~= 'string' then holder = '' end
  return refuse(redis.call('PTTL', KEYS[1]), holder)
end
local function fence()
  if ARGV[3] ~= '1' then return 0 end
  return tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
local mine = redis.call('ZSCORE', KEYS[5], ARGV[1])
if mine and tonumber(mine) > now then return fence() end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) > redis.call('ZCARD', KEYS[4]) then
    if ARGV[4] == '2' then wake_one() end
    return refuse(-1, '')
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[5], last[2])
if ARGV[4] ~= '0' then
  redis.call('ZREM', KEYS[3], ARGV[6])
  redis.call('ZREM', KEYS[4], ARGV[6])
  if redis.call('ZCARD', KEYS[4]) > 0 then wake_one() end
end
return fence()
",
    )
});

/// Lengthens our member's hold to `ttl` from now; never shortens it, never re-creates a
/// member that is gone or expired.
///
/// KEYS: holders, and a semaphore's permits key (kept as long as the holders). ARGV: token,
/// ttl ms. Returns 1 extended, 0 missing or expired.
pub(crate) static SHARED_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
if tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local ends = now + tonumber(ARGV[2])
if ends > tonumber(s) then redis.call('ZADD', KEYS[1], ends, ARGV[1]) end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
if KEYS[2] then redis.call('PEXPIREAT', KEYS[2], last[2]) end
return 1
",
    )
});

/// Removes our member, and moves the set's expiry to the end of the last member left (a
/// writer's `try_lock` takes the key's existence for a live hold, see `proto/plain.rs`); when
/// waiters are announced, leaves one more wake-up signal (at most one per live waiter), kept
/// until the last announcement ends, and an optional hand-off window. With `only when empty`
/// (read holds), only the last holder's release signals: a writer can only go in then. With
/// ARGV 4 `1` (a Cluster) a signal is also announced on the list's sharded channel, as
/// `RELEASE` does.
///
/// KEYS: holders, wake, waiters, the lock key (the hand-off window is its empty value, set
/// only while it is free), and a semaphore's permits key. ARGV: token, hand-off window ms,
/// only when empty (0/1), and `1` to announce a signal (a Cluster). Returns 1 released, 0
/// missing or expired.
pub(crate) static SHARED_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
local removed = 0
if s then
  redis.call('ZREM', KEYS[1], ARGV[1])
  if tonumber(s) > now then removed = 1 end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], last[2]) end
if KEYS[5] then
  if last[2] then redis.call('PEXPIREAT', KEYS[5], last[2]) else redis.call('DEL', KEYS[5]) end
end
if removed == 1 and (ARGV[3] == '0' or not last[2]) and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local waiting = redis.call('ZCARD', KEYS[3])
  if waiting > 0 then
    local ends = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    if redis.call('LLEN', KEYS[2]) < waiting then redis.call('RPUSH', KEYS[2], '1') end
    redis.call('PEXPIREAT', KEYS[2], ends[2])
    if ARGV[4] == '1' then redis.pcall('SPUBLISH', KEYS[2], '1') end
    if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[4], '', 'PX', ARGV[2], 'NX') end
  end
end
return removed
",
    )
});

/// The live members of a holders set with their remaining ms, the stored permit count (0
/// when none) and the fence counter.
///
/// KEYS: holders, permits, fence. Returns `{count, fence, member, pttl, member, pttl, …}`.
pub(crate) static SHARED_STATUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = redis.pcall('GET', KEYS[2])
if type(n) ~= 'string' then n = '0' end
local out = {tonumber(n) or 0, tonumber(redis.call('GET', KEYS[3]) or '0') or 0}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tonumber(live[i + 1]) - now
end
return out
",
    )
});
