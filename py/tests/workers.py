"""Code that runs in worker processes (importable, so that multiprocessing's spawn finds it)."""

from __future__ import annotations

import time

import redmutex
from resp import Resp


def _read(r: Resp, name: str, fence: int, problems: list[str]) -> int:
    """The critical section's read: the counter, and a check that `fence` exceeds the last
    holder's."""
    last = int(r("GET", name + ":last-fence") or 0)
    if fence <= last:
        problems.append(f"fence {fence} after {last}")
    return int(r("GET", name + ":counter") or 0)


def _write(r: Resp, name: str, fence: int, value: int) -> None:
    """The critical section's write: the counter, and the fence it was written with."""
    r("SET", name + ":counter", value)
    r("SET", name + ":last-fence", fence)


def counter_worker(url: str, port: int, name: str, rounds: int) -> tuple[int, list[str]]:
    """`rounds` critical sections of read-modify-write on a plain Redis counter. Returns how
    many acquisitions had to wait, and any fence that did not exceed the previous holder's."""
    client = redmutex.Client(url)
    lock = client.lock(name, ttl=10.0)
    r = Resp(port)
    waits = 0
    problems: list[str] = []
    try:
        for _ in range(rounds):
            if not lock.acquire(blocking=False):
                waits += 1
                if not lock.acquire(timeout=60):
                    problems.append("acquire timed out")
                    continue
            try:
                fence = lock.fence
                value = _read(r, name, fence, problems)
                time.sleep(0.001)  # widen the window a missing lock would let others in
                _write(r, name, fence, value + 1)
            finally:
                lock.release()
    finally:
        r.close()
    return waits, problems


def async_counter_worker(
    url: str, port: int, name: str, rounds: int, tasks: int, loop: str = "asyncio"
) -> tuple[int, list[str]]:
    """`tasks` asyncio tasks of this process, each making `rounds` critical sections of
    read-modify-write on a plain Redis counter through redmutex.asyncio, each with a lock
    object of its own, on asyncio's own event loop or uvloop's (`loop`). Returns how many
    acquisitions had to wait, and any fence that did not exceed the previous holder's."""
    import asyncio

    import redmutex.asyncio as aio

    client = aio.Client(url)
    r = Resp(port)
    waits = 0
    problems: list[str] = []

    async def task() -> None:
        nonlocal waits
        lock = client.lock(name, ttl=10.0)
        for _ in range(rounds):
            if not await lock.acquire(blocking=False):
                waits += 1
                if not await lock.acquire(timeout=60):
                    problems.append("acquire timed out")
                    continue
            try:
                fence = lock.fence
                value = _read(r, name, fence, problems)
                await asyncio.sleep(0.001)  # another task of this loop runs meanwhile
                _write(r, name, fence, value + 1)
            finally:
                await lock.release()

    async def main() -> None:
        await asyncio.gather(*(task() for _ in range(tasks)))

    try:
        if loop == "uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    finally:
        r.close()
    return waits, problems
