"""Code that runs in worker processes (importable, so that multiprocessing's spawn finds it)."""

from __future__ import annotations

import time

import redmutex
from resp import Resp


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
                last = int(r("GET", name + ":last-fence") or 0)
                if fence <= last:
                    problems.append(f"fence {fence} after {last}")
                value = int(r("GET", name + ":counter") or 0)
                time.sleep(0.001)  # widen the window a missing lock would let others in
                r("SET", name + ":counter", value + 1)
                r("SET", name + ":last-fence", fence)
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
                last = int(r("GET", name + ":last-fence") or 0)
                if fence <= last:
                    problems.append(f"fence {fence} after {last}")
                value = int(r("GET", name + ":counter") or 0)
                await asyncio.sleep(0.001)  # another task of this loop runs meanwhile
                r("SET", name + ":counter", value + 1)
                r("SET", name + ":last-fence", fence)
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
