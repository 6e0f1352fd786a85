"""Not a test module: mypy --strict checks this file against the stubs (scripts/test-py.sh).

Each function is a use that type checkers must accept as users write it."""

from __future__ import annotations

import redmutex


def with_block_returns(lock: redmutex.Lock) -> int:
    # `__exit__` returns None: the block cannot swallow an exception, so this function
    # always returns (with `-> bool`, mypy would report a missing return).
    with lock:
        return lock.fence


def none_where_the_runtime_takes_none(client: redmutex.Client) -> bool:
    lock = client.lock("name", ttl=None)
    return lock.acquire(blocking=None, timeout=None)


def urls_as_list_or_tuple() -> list[redmutex.Client]:
    return [
        redmutex.Client(["redis://a:6379", "redis://b:6379", "redis://c:6379"]),
        redmutex.Client(("redis://a:6379", "redis://b:6379", "redis://c:6379")),
    ]


def exit_takes_positional_arguments(lock: redmutex.Lock) -> None:
    lock.__exit__(None, None, None)


def semaphore_as_a_bounded_semaphore(client: redmutex.Client) -> list[int]:
    sem: redmutex.Semaphore = client.semaphore("payments", 3, ttl=10.0, on_lost=print)
    fences = []
    with sem:
        fences.append(sem.fence)
    if sem.acquire(blocking=True, timeout=1.5):
        sem.extend(20)
        fences.append(sem.fence)
        sem.release(1)
    status: redmutex.SemaphoreStatus = sem.status()
    held: list[tuple[bytes, float]] = status.holders
    return fences + [len(held), sem.permits]


def rwlock_sides_are_locks(client: redmutex.Client) -> tuple[int, int]:
    rw = client.rwlock("cache", ttl=None)
    read: redmutex.ReadLock = rw.read_lock()
    write: redmutex.WriteLock = rw.write_lock()
    with read:
        seen = read.fence
    assert write.acquire(False)
    write.release()
    status: redmutex.RwLockStatus = rw.status()
    return seen, status.writer.fence


def stats_are_typed(client: redmutex.Client) -> tuple[int, int, float]:
    s: redmutex.ClientStats = client.stats()
    wait: redmutex.Histogram = s.wait_seconds
    return s.acquired + s.lost_by["gone"], sum(wait.buckets), wait.sum + wait.bounds[0]


def new_stats_are_typed(client: redmutex.Client) -> tuple[int, int, float, list[int]]:
    s = client.stats()
    kinds: dict[str, redmutex.Outcomes] = s.by_kind
    mutex: redmutex.Outcomes = kinds["mutex"]
    lag: redmutex.Histogram = s.renewal_lag_seconds
    settled = mutex.acquired + mutex.refused + mutex.timed_out + mutex.interrupted + mutex.failed
    return settled, s.handoffs, lag.sum / max(lag.count, 1), s.connections


def listing_is_typed(client: redmutex.Client) -> list[tuple[str | bytes, str, float | None]]:
    locks: list[redmutex.ListedLock] = client.list() + client.list(b"jobs:*")
    rows = [(lock.name, hold.kind, hold.ttl) for lock in locks for hold in lock.holds]
    if any(lock.disagree or lock.waiters > lock.fence for lock in locks):
        removed: list[redmutex.ListedHold] = client.force_unlock("jobs:1")
        rows += [(h.holder, h.kind, float(h.nodes)) for h in removed]
    return rows


async def asyncio_usage(url: str) -> int:
    """What an asyncio service writes, typed (checked by mypy --strict, never run)."""
    import redmutex.asyncio

    client = redmutex.asyncio.Client(url, connect_timeout=1.0)
    lock = client.lock("invoice:nightly", ttl=30.0)
    async with lock:
        fence: int = lock.fence
        left: float = lock.valid_for
        lock.check()
        await lock.extend(60.0)
    got: bool = await lock.acquire(blocking=True, timeout=5.0)
    if got:
        await lock.release()
    sem = client.semaphore("payments", 3)
    async with sem:
        status = await sem.status()
        full: bool = await sem.locked()
        assert status.holders or full
    rw = client.rwlock("prices")
    async with rw.read_lock():
        seen: redmutex.RwLockStatus = await rw.write_lock().status()
        assert seen.readers
    lost: bool = await client.lock("x").wait_lost(0.1)
    stats: redmutex.ClientStats = client.stats()
    return fence + int(left) + int(lost) + stats.acquired
