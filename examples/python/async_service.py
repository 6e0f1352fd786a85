"""An asyncio service's endpoint behind redmutex.asyncio: many requests, one refresh at a time.

    python examples/python/async_service.py [redis://127.0.0.1:6379]

The shape of a FastAPI (or aiohttp) handler: one client per process, opened at start-up, and a
lock object per request. Twenty requests arrive at once on two "replicas" (two clients here);
the refresh of the report they ask for runs once at a time across them, each run gets a larger
fence to pass to the store, and a request that cannot get the lock within its budget answers
from the cache instead of piling up. With FastAPI it reads:

    app = FastAPI()
    locks = redmutex.asyncio.Client(os.environ["REDMUTEX_URL"])

    @app.post("/reports/{name}/refresh")
    async def refresh(name: str) -> dict[str, object]:
        lock = locks.lock(f"report:{name}", ttl=30.0)
        if not await lock.acquire(timeout=2.0):  # a cancelled request leaves nothing held
            return {"refreshed": False}
        try:
            return {"refreshed": True, "fence": await rebuild(name, fence=lock.fence)}
        finally:
            await lock.release()
"""

from __future__ import annotations

import asyncio
import os
import sys

import redmutex.asyncio

REPORT = "report:daily-sales"
inside = 0  # refreshes running now, in this process (the lock keeps it at most 1)
fences: list[int] = []


async def rebuild(fence: int) -> int:
    """The slow part: a refresh that writes with its fence (the store refuses older ones)."""
    global inside
    inside += 1
    try:
        assert inside == 1, "two refreshes at once"
        if fences and fence <= fences[-1]:
            raise RuntimeError(f"fence {fence} after {fences[-1]}")
        fences.append(fence)
        await asyncio.sleep(0.15)
        return fence
    finally:
        inside -= 1


async def refresh(locks: redmutex.asyncio.Client, request: int) -> str:
    """One request's handler."""
    lock = locks.lock(REPORT, ttl=30.0)
    if not await lock.acquire(timeout=2.0):
        return f"request {request}: busy; answered from the cache"
    try:
        fence = await rebuild(lock.fence)
        return f"request {request}: refreshed with fence {fence}"
    finally:
        await lock.release()


async def main(url: str) -> None:
    replicas = [redmutex.asyncio.Client(url), redmutex.asyncio.Client(url)]
    answers = await asyncio.gather(
        *(refresh(replicas[i % 2], i) for i in range(20))
    )
    for answer in answers:
        print(answer)
    refreshed = sum("refreshed" in a for a in answers)
    print(f"{refreshed} refreshes, one at a time, fences increasing")
    assert refreshed == len(fences) and refreshed > 0


if __name__ == "__main__":
    default = os.environ.get("REDMUTEX_URL", "redis://127.0.0.1:6379")
    url = sys.argv[1] if len(sys.argv) > 1 else default
    asyncio.run(main(url))
