"""redmutex for asyncio: the same locks, awaited, for services on an event loop.

    import redmutex.asyncio

    client = redmutex.asyncio.Client("redis://127.0.0.1:6379")   # same arguments as redmutex.Client
    lock = client.lock("invoice:nightly:lock", ttl=30.0)
    async with lock:                        # waits; woken by the release, not by polling
        await send_invoices(fence=lock.fence)

Each lock object mirrors asyncio.Lock and the blocking redmutex.Lock: `async with`,
`await acquire(blocking=True, timeout=None) -> bool`, `await release()`, `await extend(ttl)`,
`await locked()` (a Semaphore's: whether no permit can be taken now, as
asyncio.Semaphore.locked()), `await status()` (a read or write side's is its RwLock's),
`await wait_lost(timeout=None)`, and the local, non-awaiting `fence`, `owned()`, `check()`
and `valid_for`. The exceptions are the blocking API's.

An acquisition belongs to the lock object, as with asyncio.Lock: any task of the loop may
release it, and owned() is true for every task while the object holds it. (The blocking Lock's
acquisitions belong to the thread that made them.) Use one lock object per task when tasks
must not share a hold; a second acquire() on an object that holds the lock waits for its
release, as asyncio.Lock does.

Nothing runs on the event loop's thread but local steps: each network call runs on a thread of
this module's pool, and the loop awaits its answer. A wait for a release is the core's, woken
by the release (a waiting task costs Redis what a waiting thread costs). Cancellation is safe:
a task cancelled while it waits (task.cancel(), asyncio.timeout, Ctrl-C on asyncio.run) ends
its wait at once and leaves nothing held and no announcement behind, also when the grant comes
at the moment of the cancellation (it is released on the pool); a task cancelled inside
`async with` releases on the way out.

on_lost callables are called as in the blocking API, on a thread of the library: reach the
loop from there with loop.call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import os
from types import TracebackType
import typing

import redmutex
from redmutex._pool import Pool
from redmutex._redmutex import Canceller, Grant

__all__ = ["Client", "Lock", "ReadLock", "RwLock", "Semaphore", "WriteLock"]

_T = typing.TypeVar("_T")

# The pool's threads make the network calls; a waiting acquire holds one while it waits (in
# the core, with no Redis command until the release), so the pool is sized for many waiting
# tasks. Threads start on demand, and never on the loop's thread (_pool.py says why). At exit,
# Python waits for the pool's calls: a release or a discarded grant sent as the loop ended
# still completes.
_POOL = Pool(int(os.environ.get("REDMUTEX_ASYNCIO_THREADS", "256")), "redmutex-asyncio")


async def _run(call: typing.Callable[..., _T], *args: typing.Any) -> _T:
    """`call(*args)` on the pool, awaited: cancelling the await leaves it to run."""
    return await asyncio.wrap_future(_POOL.submit(call, *args))


def _discard_when_done(taken: concurrent.futures.Future[Grant | None]) -> None:
    """On the pool: once the abandoned acquisition has ended (its wait was cancelled, so at
    once), releases what it took."""
    try:
        grant = taken.result()
    except BaseException:
        return
    if grant is not None:
        grant.discard()


_Sync = typing.TypeVar(
    "_Sync", redmutex.Lock, redmutex.Semaphore, redmutex.ReadLock, redmutex.WriteLock
)


class _Lease(typing.Generic[_Sync]):
    """What every lock object of this module does, around the blocking object `_sync`."""

    __slots__ = ("_sync",)

    def __init__(self, sync: _Sync) -> None:
        self._sync: _Sync = sync

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take it and return True, or return False when the wait ran out.

        blocking: when false, make one attempt. timeout: seconds to wait at most (None or -1:
        until granted; 0: one attempt). Cancelling the task ends the wait at once and leaves
        nothing held.
        """
        canceller = Canceller()
        taken = _POOL.submit(self._sync._take, blocking, timeout, canceller)
        try:
            grant = await asyncio.wrap_future(taken)
        except BaseException:
            # Cancelled (or the loop is going away): end the wait, and release on the pool
            # whatever it took meanwhile.
            canceller.cancel()
            _POOL.submit(_discard_when_done, taken)
            raise
        if grant is None:
            return False
        self._sync._install(grant)
        return True

    async def release(self) -> None:
        """Release it on every node. Cancelling the await leaves the release running."""
        await _run(self._sync.release)

    async def extend(self, ttl: float) -> None:
        """Extend the current lease to `ttl` seconds from now (never shortening it)."""
        await _run(self._sync.extend, ttl)

    async def wait_lost(self, timeout: float | None = None) -> bool:
        """Wait until the current acquisition is lost (True), or released or `timeout`
        seconds passed (False). Waits in slices of 0.25 s on the pool, so that a cancelled
        wait leaves no thread waiting for long."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            # At least one look, also with no time left: an acquisition lost already is
            # reported lost.
            left = 0.25 if deadline is None else max(0.0, min(0.25, deadline - loop.time()))
            if await _run(self._sync.wait_lost, left):
                return True
            if not self._sync.owned():
                # Lost just now, or released: the blocking call tells them apart at once.
                return await _run(self._sync.wait_lost, 0)
            if deadline is not None and loop.time() >= deadline:
                return False

    @property
    def fence(self) -> int:
        """The current acquisition's fence number (local; LockLostError once it is lost)."""
        return self._sync.fence

    def owned(self) -> bool:
        """Whether this object holds it now, answered locally."""
        return self._sync.owned()

    def check(self) -> None:
        """Raise LockLostError (or NotHeldError) unless owned(); local."""
        self._sync.check()

    @property
    def valid_for(self) -> float:
        """Seconds the current acquisition stays valid without another renewal (0.0 when
        not held); local."""
        return self._sync.valid_for

    @property
    def ttl(self) -> float:
        """The lease of each acquisition, in seconds."""
        return self._sync.ttl

    async def __aenter__(self) -> _Lease[_Sync]:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"<redmutex.asyncio {self._sync!r}>"


class Lock(_Lease[redmutex.Lock]):
    """A distributed lock for asyncio, made by Client.lock(): see the module's doc."""

    __slots__ = ()

    async def locked(self) -> bool:
        """Whether anyone holds it, this process or another: asks Redis."""
        return await _run(self._sync.locked)

    async def status(self) -> redmutex.LockStatus:
        """Who holds it, for how long, and its last fence: asks Redis."""
        return await _run(self._sync.status)


class Semaphore(_Lease[redmutex.Semaphore]):
    """A distributed semaphore for asyncio, made by Client.semaphore()."""

    __slots__ = ()

    async def release(self, n: int = 1) -> None:
        """Give `n` of this object's permits back."""
        await _run(self._sync.release, n)

    async def locked(self) -> bool:
        """Whether no permit can be taken now (every permit of the name is held, by this
        process or another), as asyncio.Semaphore.locked(): asks Redis."""
        return await _run(self._sync.locked)

    async def status(self) -> redmutex.SemaphoreStatus:
        """The live permits of the name: asks Redis."""
        return await _run(self._sync.status)

    @property
    def permits(self) -> int:
        """The number of permits."""
        return self._sync.permits


class ReadLock(_Lease[redmutex.ReadLock]):
    """The read side of an RwLock for asyncio: many readers at once."""

    __slots__ = ("_rwlock",)

    def __init__(self, sync: redmutex.ReadLock, rwlock: redmutex.RwLock) -> None:
        super().__init__(sync)
        self._rwlock = rwlock

    async def locked(self) -> bool:
        """Whether anyone holds a read side, this process or another: asks Redis."""
        return await _run(self._sync.locked)

    async def status(self) -> redmutex.RwLockStatus:
        """The writer and the readers of the name, as RwLock.status(): asks Redis."""
        return await _run(self._rwlock.status)


class WriteLock(_Lease[redmutex.WriteLock]):
    """The write side of an RwLock for asyncio: one writer, and no reader meanwhile."""

    __slots__ = ("_rwlock",)

    def __init__(self, sync: redmutex.WriteLock, rwlock: redmutex.RwLock) -> None:
        super().__init__(sync)
        self._rwlock = rwlock

    async def locked(self) -> bool:
        """Whether a writer holds it, this process or another: asks Redis."""
        return await _run(self._sync.locked)

    async def status(self) -> redmutex.RwLockStatus:
        """The writer and the readers of the name, as RwLock.status(): asks Redis."""
        return await _run(self._rwlock.status)


class RwLock:
    """A read-write lock for asyncio, made by Client.rwlock(): read_lock() and write_lock()
    are lock objects like Lock."""

    __slots__ = ("_sync", "_read", "_write")

    def __init__(self, sync: redmutex.RwLock) -> None:
        self._sync = sync
        self._read = ReadLock(sync.read_lock(), sync)
        self._write = WriteLock(sync.write_lock(), sync)

    def read_lock(self) -> ReadLock:
        """The read side: the same object on every call (it may hold several read holds)."""
        return self._read

    def write_lock(self) -> WriteLock:
        """The write side: the same object on every call."""
        return self._write

    async def status(self) -> redmutex.RwLockStatus:
        """The writer and the readers: asks Redis."""
        return await _run(self._sync.status)

    def __repr__(self) -> str:
        return f"<redmutex.asyncio {self._sync!r}>"


class Client:
    """One Redis server, or several independent masters (Redlock), for asyncio: the same
    arguments as redmutex.Client. Opening it does no I/O."""

    __slots__ = ("_sync",)

    def __init__(self, url: str | list[str] | tuple[str, ...], **options: typing.Any) -> None:
        self._sync = redmutex.Client(url, **options)

    @property
    def sync(self) -> redmutex.Client:
        """The blocking client underneath (its stats(), servers(), node_names(), …)."""
        return self._sync

    def lock(self, name: str | bytes, ttl: float | None = 30.0, **options: typing.Any) -> Lock:
        """A Lock on `name`: the arguments of redmutex.Client.lock()."""
        return Lock(self._sync.lock(name, ttl, **options))

    def semaphore(
        self, name: str | bytes, permits: int, ttl: float | None = 30.0, **options: typing.Any
    ) -> Semaphore:
        """A Semaphore of `permits` on `name`: the arguments of redmutex.Client.semaphore()."""
        return Semaphore(self._sync.semaphore(name, permits, ttl, **options))

    def rwlock(
        self, name: str | bytes, ttl: float | None = 30.0, **options: typing.Any
    ) -> RwLock:
        """An RwLock on `name`: the arguments of redmutex.Client.rwlock()."""
        return RwLock(self._sync.rwlock(name, ttl, **options))

    def stats(self) -> redmutex.ClientStats:
        """What this client's locks did so far (local)."""
        return self._sync.stats()

    async def list(self, pattern: str | bytes = "*") -> builtins.list[redmutex.ListedLock]:
        """As redmutex.Client.list(), awaited."""
        return await _run(self._sync.list, pattern)

    async def force_unlock(self, name: str | bytes) -> builtins.list[redmutex.ListedHold]:
        """As redmutex.Client.force_unlock(), awaited."""
        return await _run(self._sync.force_unlock, name)

    def __repr__(self) -> str:
        return f"<redmutex.asyncio {self._sync!r}>"
