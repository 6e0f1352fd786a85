"""A blocking distributed mutex on Redis, with a Rust core.

    import redmutex

    client = redmutex.Client("redis://127.0.0.1:6379")   # or a list of URLs (Redlock)
    lock = client.lock("invoice:nightly:lock", ttl=30.0)
    with lock:                                            # waits; releases on exit
        send_invoices(fence=lock.fence)

A Lock mirrors threading.Lock and redis-py's Lock: acquire(blocking=True, timeout=None),
release(), locked() (anyone holds it: asks Redis), owned() (we hold it: local), extend(ttl),
and `with lock:`; status() tells who holds it, for how long, and its last fence. While held,
the lease (ttl) is renewed on a background thread; if it is lost anyway, check(), release()
and the fence property raise LockLostError and the on_lost callable is called. Every network
wait releases the GIL and honours Ctrl-C.

client.semaphore(name, permits) gives a Semaphore (threading.BoundedSemaphore's API: at most
`permits` holders fleet-wide), and client.rwlock(name) an RwLock whose read_lock() and
write_lock() are lock objects like Lock (many readers or one writer).

client.list(pattern) tells every lock held or waited for whose name matches, and
client.force_unlock(name) breaks a lock whose holder is gone for good.

redmutex.asyncio gives the same locks to asyncio services: `async with lock:`, awaited calls,
cancel-safe waits.

Errors derive from LockError; bad arguments raise TypeError or ValueError before anything is
sent to Redis.
"""

from redmutex._redmutex import (
    AuthenticationError,
    Client,
    ClientStats,
    Histogram,
    ListedHold,
    ListedLock,
    Lock,
    LockConnectionError,
    LockError,
    LockLostError,
    LockStatus,
    NoQuorumError,
    NotHeldError,
    Outcomes,
    ReadLock,
    RwLock,
    RwLockStatus,
    Semaphore,
    SemaphoreStatus,
    ServerError,
    WriteLock,
    __version__,
)

__all__ = [
    "AuthenticationError",
    "Client",
    "ClientStats",
    "Histogram",
    "ListedHold",
    "ListedLock",
    "Lock",
    "LockConnectionError",
    "LockError",
    "LockLostError",
    "LockStatus",
    "NoQuorumError",
    "NotHeldError",
    "Outcomes",
    "ReadLock",
    "RwLock",
    "RwLockStatus",
    "Semaphore",
    "SemaphoreStatus",
    "ServerError",
    "WriteLock",
    "__version__",
]
