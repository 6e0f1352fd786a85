"""Type stubs for the native module; keep in step with py/src/*.rs."""

import builtins
import os
from collections.abc import Callable
from types import TracebackType
from typing import final

__all__ = [
    "AuthenticationError",
    "Canceller",
    "Client",
    "ClientStats",
    "Grant",
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

__version__: str

class LockError(Exception):
    """Base class of the errors redmutex raises (bad arguments raise TypeError or ValueError)."""

class LockLostError(LockError):
    """The lock was lost: it expired, or another owner's value replaced ours.

    Raised by check(), release(), extend() and the fence property once the lease is gone;
    another process may hold the lock now.
    """

class NoQuorumError(LockError):
    """Fewer than a majority of the nodes answered or agreed; the message lists each node."""

class LockConnectionError(LockError, ConnectionError):
    """A Redis node could not be reached, or the connection broke or timed out."""

class AuthenticationError(LockError):
    """A Redis node refused the credentials (WRONGPASS, NOAUTH, NOPERM)."""

class NotHeldError(LockError, RuntimeError):
    """This Lock does not hold the lock: never acquired, already released, or inherited
    through fork."""

class ServerError(LockError):
    """A Redis node answered with an error (OOM, READONLY, WRONGTYPE, ...)."""

@final
class Client:
    """One Redis server, or several independent masters (Redlock). Thread-safe; no I/O
    happens until a lock is used, and a forked child opens its own connections."""

    def __new__(
        cls,
        url: str | list[str] | tuple[str, ...],
        *,
        connect_timeout: float | None = None,
        node_timeout: float | None = None,
        owner: str | None = None,
        tls_ca_cert: bytes | str | os.PathLike[str] | None = None,
        require_noeviction: bool = False,
    ) -> Client:
        """Make a client.

        Args:
            url: a Redis URL ("redis://host:6379", "redis://user:password@host:6379/0",
                "rediss://host:6380"; a master behind Sentinel as
                "redis+sentinel://s1:26379,s2:26379/mymaster", a Redis Cluster as
                "redis+cluster://h1:7000,h2:7000"; "rediss+sentinel://" and
                "rediss+cluster://" for either over TLS), or a list of URLs of independent
                masters for Redlock (use 3, 5 or 7); a lock is then held only while a majority
                agrees.
            connect_timeout: seconds to open one connection (default 1.0); also how long a
                lock call rides over unreachable nodes before it raises, and how long the
                client's first request to each node (which opens its first connection) may
                take.
            node_timeout: seconds each node has to answer one request (default: 2 % of each
                lock's ttl, between 0.05 and 0.25).
            owner: the label at the start of every lock value, so that GET on a lock tells
                who holds it (default "hostname:pid"); 1 to 128 visible ASCII characters.
            tls_ca_cert: for TLS URLs (rediss://, rediss+cluster://, rediss+sentinel://), the
                CA certificate(s) the servers' certificates must chain to instead of the
                system's roots: PEM as bytes, or the path of a PEM file. Certificates are
                always checked unless a URL ends in "#insecure".
            require_noeviction: refuse a server whose maxmemory-policy is not noeviction
                (its lock calls raise ServerError at once). Without it, such a server is
                used, and a RuntimeWarning says once per server that memory pressure may evict
                a held lock or a fence counter.

        Raises:
            TypeError: url is not a str or a list of str; tls_ca_cert is not bytes or a path.
            ValueError: no URL, a malformed URL, a timeout outside 0.001..3600 s, a bad owner,
                a tls_ca_cert without a PEM certificate or given for a redis:// URL.
            OSError: the tls_ca_cert file cannot be read.
        """

    def lock(
        self,
        name: str | bytes,
        ttl: float | None = 30.0,
        *,
        auto_renew: bool = True,
        max_hold: float | None = None,
        fencing: bool = True,
        on_lost: Callable[[], object] | None = None,
        min_replicas: tuple[int, float] | None = None,
    ) -> Lock:
        """A Lock on `name`; cheap, sends nothing until it is used.

        Args:
            name: the Redis key of the lock, str (sent as UTF-8) or bytes, 1 to 512 bytes.
            ttl: the lease in seconds (0.01 to 86400; None means 30.0): how long the lock
                outlives a holder that stopped renewing it (crashed, frozen, partitioned).
            auto_renew: keep extending the lease every ttl/3 while the Lock is held, on the
                client's renew thread (which needs no GIL).
            max_hold: seconds after which renewal stops, so the lock expires even if the
                holder never releases it; None for no limit.
            fencing: give each acquisition a fence number (Lock.fence). Turn it off for names
                of unbounded cardinality: the counter is one key per name that never expires.
            on_lost: called with no arguments, once, when a held lock is lost (renewal failed
                or another owner replaced our value). It runs on a background thread; keep it
                short. Its exceptions go to sys.unraisablehook. Not called after release().
            min_replicas: None (the default) or (n, timeout_seconds): each grant and
                renewal counts on a node only once n of its replicas acknowledged the write
                within the timeout (Redis WAIT; 0.001 s to ttl/2); a grant that falls short
                is undone. A failover to one of those replicas keeps the lock; WAIT is not
                consensus, so a failover to a replica without the write can still lose it.

        Raises:
            TypeError: a name that is not str/bytes, a non-number, a non-callable on_lost,
                a min_replicas that is not a (int, number) tuple.
            ValueError: an empty or too long name, a ttl or max_hold out of range (NaN,
                negative, zero, huge), a min_replicas n below 1 or timeout out of range.
        """

    def semaphore(
        self,
        name: str | bytes,
        permits: int,
        ttl: float | None = 30.0,
        *,
        auto_renew: bool = True,
        max_hold: float | None = None,
        fencing: bool = True,
        on_lost: Callable[[], object] | None = None,
    ) -> Semaphore:
        """A Semaphore of `permits` on `name`: at most that many holders at once; cheap,
        sends nothing until it is used.

        Args:
            name: str or bytes, 1 to 512 bytes.
            permits: an int from 1 to 1024. Every user of one name must give the same count
                while any permit is held; acquire() raises ValueError otherwise.
            ttl, auto_renew, max_hold, fencing, on_lost: as for lock(), for each permit.

        Needs one voter (a single server, Sentinel or a Cluster): on a client of several
        independent masters, acquire() raises ValueError, since majorities granting
        different permits need not share a node.

        Raises:
            TypeError: a name that is not str/bytes, permits that is not an int, a
                non-number, a non-callable on_lost.
            ValueError: an empty or too long name, permits outside 1..1024, a ttl or
                max_hold out of range.
        """

    def rwlock(
        self,
        name: str | bytes,
        ttl: float | None = 30.0,
        *,
        auto_renew: bool = True,
        max_hold: float | None = None,
        fencing: bool = True,
        on_lost: Callable[[], object] | None = None,
    ) -> RwLock:
        """An RwLock on `name`: many readers or one writer at a time; cheap, sends nothing
        until it is used. Its write side is the lock of the same name: lock(name) and its
        writers exclude each other, and both exclude its readers.

        Args:
            name: str or bytes, 1 to 512 bytes (the Redis key of the write side).
            ttl, auto_renew, max_hold, fencing, on_lost: as for lock(), for each read and
                write hold.

        Raises:
            TypeError, ValueError: as for lock().
        """

    @property
    def nodes(self) -> list[str]:
        """The nodes' addresses, without credentials."""

    def list(self, pattern: str | bytes = "*") -> builtins.list[ListedLock]:
        """Every lock whose name matches `pattern` (Redis's glob: *, ?, [a-z], \\x) and that
        is held or waited for now, sorted by name: its holds with their holders and leases,
        its last fence and its waiters, read on every node. What `redmutex list` shows. For
        monitoring: the answer may be stale at once.

        Args:
            pattern: str (sent as UTF-8; names come back as str) or bytes (names come back
                as bytes), 1 to 2048 bytes; "*" matches every name.

        Locks are found by a SCAN of every server for the keys a lock keeps beside its own
        (its fence counter, read holds, permits, waiters): a lock taken with fencing=False,
        held while nobody waits, is not listed (Lock.status() reads it by name).

        Raises:
            TypeError: a pattern that is not str or bytes.
            ValueError: an empty pattern, or one over 2048 bytes.
            NoQuorumError, LockConnectionError: too few nodes answered.
        """

    def force_unlock(self, name: str | bytes) -> builtins.list[ListedHold]:
        """Remove every hold of the lock `name`, whoever has it (a Lock's or an RwLock
        writer's, the read holds, a Semaphore's permits); returns what was removed, each hold
        with the number of nodes it was removed from (empty when nothing was held). What
        `redmutex unlock --force` does, for a lock whose holder is gone for good.

        Each node is sent the release of each hold, with the holder's own value: a hold taken
        meanwhile by someone else is kept, fences keep growing, and waiters are woken as by
        the holder's release. A holder that is still alive runs on until its next renewal or
        check() tells it the lock is lost: until then two holders run at once.

        Args:
            name: str (sent as UTF-8) or bytes, 1 to 512 bytes.

        Raises:
            TypeError: a name that is not str or bytes.
            ValueError: an empty or too long name.
            NoQuorumError, LockConnectionError: too few nodes answered (some holds may have
                been removed on those that did).
        """

    def stats(self) -> ClientStats:
        """What this client's locks did so far, and what they hold and wait for now: counters
        the library keeps as it goes. Local, no network."""

    @property
    def servers(self) -> builtins.list[str | None]:
        """What each node said it runs at the client's first connection to it ("Redis
        7.0.15", "Valkey 8.1.8"), in the order of nodes; None for a node not connected to yet,
        or whose server would not say. Local, no network."""

    @property
    def quorum(self) -> int:
        """How many nodes must agree: len(nodes) // 2 + 1."""

@final
class Lock:
    """A distributed lock on one name, made by Client.lock().

    Mirrors threading.Lock: not re-entrant (acquiring a Lock that is held, by this object
    too, waits for its release). Thread-safe. An acquisition belongs to the thread that made
    it (as with redis-py's thread_local=True): release(), extend(), check(), owned(), fence,
    valid_for and wait_lost() act on the calling thread's own acquisition, so a thread whose
    lock was lost gets LockLostError and never releases what another thread acquired since.
    A thread that made none acts on the most recent acquisition (a watchdog thread waiting in
    wait_lost(), a threading.Timer that releases). A Lock inherited by a forked child neither
    renews nor releases the parent's lock. A held Lock that is garbage-collected releases the
    lock, best effort: that can take up to the client's connect_timeout while it asks
    unreachable nodes again (never past the lock's validity).

    On the main thread, Ctrl-C interrupts every call that can wait for Redis within 100 ms
    with KeyboardInterrupt: acquire() (also while it opens the first connection), release(),
    the end of a `with` block, extend(), locked(), status() and wait_lost(). An interrupted
    release goes on in the background (or the lease runs out). Python runs signal handlers
    on the main thread only, so calls on other threads are not interrupted.
    """

    def _take(
        self, blocking: bool | None, timeout: float | None, canceller: Canceller
    ) -> Grant | None:
        """For redmutex.asyncio, on a thread of its pool: acquire() ended at once by
        `canceller`, the lease handed back as a Grant (None: not acquired)."""

    def _install(self, grant: Grant) -> None:
        """For redmutex.asyncio, on the loop's thread: the Grant becomes this object's
        acquisition (local)."""

    def acquire(self, blocking: bool | None = True, timeout: float | None = None) -> bool:
        """Take the lock: True when held, False when the wait ran out.

        Args:
            blocking: when false, make one attempt and return at once (a timeout is then a
                ValueError, as with threading.Lock). None means True, as in redis-py.
            timeout: seconds to wait at most; None or -1 waits until the lock is free
                (however long that is), 0 makes one attempt.

        The GIL is released while waiting, and a signal (Ctrl-C) interrupts the wait within
        100 ms: its exception (KeyboardInterrupt) is raised and nothing is left held.

        Raises:
            LockConnectionError, NoQuorumError: the nodes stayed unreachable for the client's
                connect_timeout.
            AuthenticationError, ServerError: a node refused the request.
            ValueError: a negative or NaN timeout, or a timeout with blocking=False.
        """

    def release(self) -> None:
        """Release the lock on every node (only where it still holds our token) and stop
        renewing it.

        Raises:
            NotHeldError: this Lock is not acquired.
            LockLostError: the lock had expired or another owner had it; their value is left
                in place.
            NoQuorumError, LockConnectionError: not enough nodes confirmed; the lock then
                expires by its TTL.
        """

    def locked(self) -> bool:
        """Whether anyone holds the lock, this process or another: asks Redis."""

    def status(self) -> LockStatus:
        """Who holds the lock (this process or another), for how long, and its last fence
        number: asks Redis. For monitoring; the answer may be stale at once.

        Raises:
            NoQuorumError, LockConnectionError: too few nodes answered.
        """

    def owned(self) -> bool:
        """Whether this Lock holds the lock now, answered locally (no network): acquired,
        not released, not lost, within its validity. False in a forked child."""

    def check(self) -> None:
        """Raise unless owned(); no network. Call it before each step of a critical section.

        Raises:
            LockLostError: the lock was acquired but is lost; the message says why (another
                owner has it, it was gone when renewed, nodes are down, its validity or
                max_hold ran out).
            NotHeldError: this Lock is not acquired.
        """

    def extend(self, ttl: float) -> None:
        """Extend the lease to `ttl` seconds from now (like redis-py's extend with
        replace_ttl=True); later automatic renewals use this ttl too. Never re-creates a lock
        that is gone. The servers only ever lengthen an expiry: with a ttl shorter than the
        lease has left, the key keeps its later expiry there (a request that arrives late
        must never cut a longer lease short), while the lock counts itself valid for `ttl`
        from now.

        Args:
            ttl: seconds, 0.01 to 86400.

        Raises:
            NotHeldError: this Lock is not acquired.
            LockLostError: the lock is gone or someone else has it.
            NoQuorumError, LockConnectionError: not enough nodes confirmed.
            ValueError: ttl out of range.
        """

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the lock is lost (True), or `timeout` seconds pass or the lock is
        released (False); for watchdog threads. False at once when not acquired. The GIL is
        released while waiting, and Ctrl-C interrupts it.

        Args:
            timeout: seconds to wait at most; None waits until lost or released.
        """

    @property
    def fence(self) -> int:
        """The fence number of this acquisition: greater than that of every earlier holder
        of the name (0 with fencing=False). Pass it to the resource you protect, which should
        refuse writes with a lower number than one it has seen.

        Raises:
            NotHeldError: this Lock is not acquired.
            LockLostError: the lock was lost (a stale holder gets no number to write with).
        """

    @property
    def valid_for(self) -> float:
        """Seconds left of this acquisition's validity (renewal moves it forward); 0.0 when
        this Lock does not hold the lock. No network."""

    @property
    def name(self) -> str | bytes:
        """The lock's name (its Redis key), as given."""

    @property
    def ttl(self) -> float:
        """The lease in seconds, as given to Client.lock()."""

    def __enter__(self) -> Lock:
        """acquire() with no timeout; returns the Lock."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None:
        """release(); never suppresses the exception of the with-block. If the release
        fails (say LockLostError), that error is raised, chained to the block's exception."""

@final
class LockStatus:
    """Who holds a lock, for how long, and the last fence number granted for its name, as
    Redis had it when Lock.status() asked: what `redmutex status` shows."""

    @property
    def holder(self) -> bytes | None:
        """The holder's value (b"owner-label:random-hex" for redmutex holders), or None when
        the lock is free."""

    @property
    def ttl(self) -> float | None:
        """Seconds left of the holder's lease, or None when the lock is free or never
        expires."""

    @property
    def fence(self) -> int:
        """The last fence number granted for the name (0 when none was)."""

@final
class ListedHold:
    """One hold of a lock, as the nodes that have it see it (Client.list()), or one that
    Client.force_unlock() removed."""

    @property
    def kind(self) -> str:
        """"exclusive" (a Lock, or an RwLock's writer: the same hold), "read" (an RwLock's
        reader) or "permit" (a Semaphore's)."""

    @property
    def holder(self) -> bytes:
        """The holder's value (b"owner-label:random-hex" for redmutex holders)."""

    @property
    def ttl(self) -> float | None:
        """Seconds left of its lease, the shortest among the nodes that have it (for a
        removed hold, what it had left); None for a key without expiry."""

    @property
    def nodes(self) -> int:
        """On how many nodes it is (listed), or was removed from (force_unlock())."""

@final
class ListedLock:
    """One lock that Client.list() found, held or waited for, as the nodes had it when
    asked (for monitoring; it may be stale at once)."""

    @property
    def name(self) -> str | bytes:
        """The lock's name: str when the pattern was a str (bytes for a name that is not
        UTF-8), bytes when it was bytes; either may be passed back to force_unlock()."""

    @property
    def holds(self) -> list[ListedHold]:
        """Its holds, by kind, then holder; empty for a lock listed only for its waiters."""

    @property
    def fence(self) -> int:
        """The last fence number granted for the name (the largest among the nodes)."""

    @property
    def waiters(self) -> int:
        """How many callers have announced that they wait for it (the most any node
        counts)."""

    @property
    def nodes(self) -> int:
        """How many nodes answered."""

    @property
    def disagree(self) -> bool:
        """Whether the nodes that answered disagree: some hold is not on every one of them
        (a Redlock node that missed a grant or a release; it settles as leases run out)."""

@final
class Histogram:
    """Durations in fixed buckets, in seconds."""

    @property
    def bounds(self) -> list[float]:
        """The buckets' upper bounds: 100 µs to 60 s (the same in every histogram)."""

    @property
    def buckets(self) -> list[int]:
        """How many durations fell in each bucket: buckets[i] counts those above
        bounds[i - 1] (0 for the first) and at most bounds[i]; the last one, those above the
        last bound. Not cumulative."""

    @property
    def count(self) -> int:
        """How many durations were recorded."""

    @property
    def sum(self) -> float:
        """Their sum, in seconds."""

@final
class Outcomes:
    """How one kind of lock's acquisitions ended (ClientStats.by_kind): each in exactly one
    of the five."""

    @property
    def acquired(self) -> int:
        """Granted."""

    @property
    def refused(self) -> int:
        """Refused at once (blocking=False)."""

    @property
    def timed_out(self) -> int:
        """Their wait ran out."""

    @property
    def interrupted(self) -> int:
        """Ended by a signal handler's exception (Ctrl-C)."""

    @property
    def failed(self) -> int:
        """Failed with an error (no quorum, no connection, ...)."""

@final
class ClientStats:
    """What one client's locks did since it was made, and what they hold and wait for now
    (Client.stats()). An acquire ends in exactly one of acquired, refused, timed_out,
    interrupted and failed, and under one kind of by_kind; lost_by's values add up to lost."""

    @property
    def acquired(self) -> int:
        """Acquisitions granted."""

    @property
    def refused(self) -> int:
        """Acquisitions refused at once (blocking=False)."""

    @property
    def timed_out(self) -> int:
        """Acquisitions whose wait ran out."""

    @property
    def interrupted(self) -> int:
        """Acquisitions ended by a signal handler's exception (Ctrl-C)."""

    @property
    def failed(self) -> int:
        """Acquisitions that failed with an error (no quorum, no connection, ...)."""

    @property
    def by_kind(self) -> dict[str, Outcomes]:
        """The same acquisitions by kind of lock: "mutex" (Lock, and RwLock's write side),
        "semaphore" and "read" (RwLock's read side)."""

    @property
    def handoffs(self) -> int:
        """Acquisitions granted after waiting for a release (hand-offs received): woken by a
        release, or finding the lock free when a wait ended."""

    @property
    def lost(self) -> int:
        """Held locks lost, whatever the reason."""

    @property
    def lost_by(self) -> dict[str, int]:
        """Losses by reason: "another_owner", "gone", "nodes_down", "validity_ran_out",
        "max_hold"."""

    @property
    def renewals(self) -> int:
        """Renewals the renew thread got confirmed."""

    @property
    def renewal_failures(self) -> int:
        """Renewal rounds that were not confirmed."""

    @property
    def held_now(self) -> int:
        """Leases held now."""

    @property
    def waiting_now(self) -> int:
        """Acquisitions that may wait and have not returned yet."""

    @property
    def wait_seconds(self) -> Histogram:
        """For every granted acquisition, the time from the call to the grant."""

    @property
    def held_seconds(self) -> Histogram:
        """For every lease that ended (released or lost), how long it was held."""

    @property
    def renewal_lag_seconds(self) -> Histogram:
        """For every renewal the renew thread sent, how late it was against its schedule: the
        renew thread falling behind is the first sign of trouble, long before a lease runs
        out."""

    @property
    def connections(self) -> list[int]:
        """Connections open now to each node, in the order of the client's nodes (a cluster's
        counts every master; a pool's idle ones, those in use and the one a wait blocks on)."""

@final
class Semaphore:
    """A distributed counting semaphore made by Client.semaphore(): at most `permits`
    holders of its name at a time, across every process that uses the name.

    Mirrors threading.BoundedSemaphore: acquire() takes one permit, release(n=1) gives n
    back, `with sem:` holds one for the block. Each permit is a lease like a Lock's (renewed
    in the background, lost after its ttl when its holder dies or stalls, with its own fence
    number), and the object may hold several at once (one per acquire). A permit belongs to
    the thread that took it: release(), extend(), check(), owned(), fence, valid_for and
    wait_lost() act on the calling thread's most recent permit, or, for a thread holding
    none, on the object's most recent permit. Releasing more than this object holds raises
    NotHeldError (a RuntimeError), where threading.BoundedSemaphore raises ValueError.
    Ctrl-C interrupts its waits on the main thread, as for Lock.
    """

    def _take(
        self, blocking: bool | None, timeout: float | None, canceller: Canceller
    ) -> Grant | None:
        """For redmutex.asyncio, on a thread of its pool: acquire() ended at once by
        `canceller`, the lease handed back as a Grant (None: not acquired)."""

    def _install(self, grant: Grant) -> None:
        """For redmutex.asyncio, on the loop's thread: the Grant becomes this object's
        acquisition (local)."""

    def acquire(self, blocking: bool | None = True, timeout: float | None = None) -> bool:
        """Take one permit: True when held, False when the wait ran out.

        Args:
            blocking: when false, make one attempt and return at once (a timeout is then a
                ValueError). None means True.
            timeout: seconds to wait at most; None or -1 waits until a permit is free, 0
                makes one attempt.

        A release wakes one waiter within about a round trip; waiters are served before
        newcomers.

        Raises:
            ValueError: live permits of the name were taken with another count; a client of
                several independent masters; a negative or NaN timeout, or a timeout with
                blocking=False.
            LockConnectionError, AuthenticationError, ServerError: as for Lock.acquire().
        """

    def release(self, n: int = 1) -> None:
        """Give back n permits: the calling thread's most recent first, then the object's
        most recent. Nothing is released when this object holds fewer than n.

        Raises:
            NotHeldError: this Semaphore holds fewer than n permits.
            LockLostError: a permit had been lost (the others are still released).
            ValueError: n is below 1.
        """

    def status(self) -> SemaphoreStatus:
        """Every holder's live permits, the count they were taken with and the last fence
        number: asks Redis. For monitoring; the answer may be stale at once."""

    def locked(self) -> bool:
        """Whether no permit can be taken now, as asyncio.Semaphore.locked(): every permit of
        the name is held (by this process or another). Asks Redis; the answer may be stale
        at once. A free permit that announced waiters come before a newcomer for counts as
        free."""

    def owned(self) -> bool:
        """Whether the current permit is held now, answered locally (no network)."""

    def check(self) -> None:
        """Raise unless owned(): LockLostError when the current permit was lost,
        NotHeldError when none is held. No network."""

    def extend(self, ttl: float) -> None:
        """Extend the current permit's lease to `ttl` seconds (0.01 to 86400) from now; later
        renewals of that permit use this ttl too. The servers only ever lengthen an expiry
        (a shorter ttl never cuts it short)."""

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the current permit is lost (True), or `timeout` seconds pass or it is
        released (False); False at once when none is held."""

    @property
    def fence(self) -> int:
        """The current permit's fence number: greater than that of every earlier permit and
        lock of the name. Several permits are held at once, so a resource shared by the
        holders must accept each holder's own fence.

        Raises:
            NotHeldError: no permit is held.
            LockLostError: the current permit was lost.
        """

    @property
    def valid_for(self) -> float:
        """Seconds left of the current permit's validity; 0.0 when none is held."""

    @property
    def permits(self) -> int:
        """The number of permits of the name."""

    @property
    def name(self) -> str | bytes:
        """The semaphore's name, as given."""

    @property
    def ttl(self) -> float:
        """The lease of each permit in seconds, as given to Client.semaphore()."""

    def __enter__(self) -> Semaphore:
        """acquire() with no timeout (one permit); returns the Semaphore."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None:
        """release() of one permit; never suppresses the exception of the with-block."""

@final
class SemaphoreStatus:
    """The live permits of a semaphore's name, as Redis had them when Semaphore.status()
    asked."""

    @property
    def permits(self) -> int | None:
        """The count the live permits were taken with; None when no permit is held."""

    @property
    def holders(self) -> list[tuple[bytes, float]]:
        """Each live permit's value and seconds left."""

    @property
    def fence(self) -> int:
        """The last fence number granted for the name (0 when none was)."""

@final
class RwLock:
    """A distributed read-write lock made by Client.rwlock(): many readers or one writer of
    its name at a time. read_lock() and write_lock() give its two sides (the same two objects
    on every call), each a lock object like Lock. Writers are preferred: once a writer waits,
    new readers queue behind it."""

    def read_lock(self) -> ReadLock:
        """The read side: held by many at once while no writer holds or waits."""

    def write_lock(self) -> WriteLock:
        """The write side: the same lock as Client.lock() of the name."""

    def status(self) -> RwLockStatus:
        """The writer (with the last fence number) and the live read holds: asks Redis."""

    @property
    def name(self) -> str | bytes:
        """The name (the Redis key of the write side), as given."""

    @property
    def ttl(self) -> float:
        """The lease of each hold in seconds, as given to Client.rwlock()."""

@final
class ReadLock:
    """The read side of an RwLock: a lock object like Lock of which several holders may
    hold the lock at once, and one thread several times (each acquire() is a hold of its
    own). A read hold's fence is that of the last write it may observe."""

    def _take(
        self, blocking: bool | None, timeout: float | None, canceller: Canceller
    ) -> Grant | None:
        """For redmutex.asyncio, on a thread of its pool: acquire() ended at once by
        `canceller`, the lease handed back as a Grant (None: not acquired)."""

    def _install(self, grant: Grant) -> None:
        """For redmutex.asyncio, on the loop's thread: the Grant becomes this object's
        acquisition (local)."""

    def acquire(self, blocking: bool | None = True, timeout: float | None = None) -> bool:
        """Take a read hold: True when held, False when the wait ran out; as Lock.acquire()."""

    def release(self) -> None:
        """Release the calling thread's most recent read hold (or, for a thread that
        holds none, the most recent one).

        Raises:
            NotHeldError: none is held.
            LockLostError: it had been lost.
        """

    def locked(self) -> bool:
        """Whether anyone holds a read hold of the name, this process or another: asks Redis."""

    def owned(self) -> bool:
        """Whether the current read hold is held now, answered locally (no network)."""

    def check(self) -> None:
        """Raise unless owned(): LockLostError when lost, NotHeldError when none is held."""

    def extend(self, ttl: float) -> None:
        """Extend the current read hold's lease to `ttl` seconds (0.01 to 86400) from now; the
        servers only ever lengthen an expiry (a shorter ttl never cuts it short)."""

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the current read hold is lost (True), or `timeout` seconds pass or it
        is released (False); False at once when none is held."""

    @property
    def fence(self) -> int:
        """The fence of the last write the current read hold may observe (0 when none).

        Raises:
            NotHeldError: none is held.
            LockLostError: it was lost.
        """

    @property
    def valid_for(self) -> float:
        """Seconds left of the current read hold's validity; 0.0 when none is held."""

    @property
    def name(self) -> str | bytes:
        """The name (the Redis key of the write side), as given."""

    @property
    def ttl(self) -> float:
        """The lease in seconds, as given to Client.rwlock()."""

    def __enter__(self) -> ReadLock:
        """acquire() with no timeout; returns this object."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None:
        """release(); never suppresses the exception of the with-block."""

@final
class WriteLock:
    """The write side of an RwLock: a lock object like Lock, and the same lock as
    Client.lock() of the name (they exclude each other). Not re-entrant."""

    def _take(
        self, blocking: bool | None, timeout: float | None, canceller: Canceller
    ) -> Grant | None:
        """For redmutex.asyncio, on a thread of its pool: acquire() ended at once by
        `canceller`, the lease handed back as a Grant (None: not acquired)."""

    def _install(self, grant: Grant) -> None:
        """For redmutex.asyncio, on the loop's thread: the Grant becomes this object's
        acquisition (local)."""

    def acquire(self, blocking: bool | None = True, timeout: float | None = None) -> bool:
        """Take the write lock: True when held, False when the wait ran out; as Lock.acquire()."""

    def release(self) -> None:
        """Release the calling thread's most recent write hold (or, for a thread that
        holds none, the most recent one).

        Raises:
            NotHeldError: none is held.
            LockLostError: it had been lost.
        """

    def locked(self) -> bool:
        """Whether anyone holds the write side (a writer, or a Lock of the name), this process or another: asks Redis."""

    def owned(self) -> bool:
        """Whether the current write hold is held now, answered locally (no network)."""

    def check(self) -> None:
        """Raise unless owned(): LockLostError when lost, NotHeldError when none is held."""

    def extend(self, ttl: float) -> None:
        """Extend the current write hold's lease to `ttl` seconds (0.01 to 86400) from now; the
        servers only ever lengthen an expiry (a shorter ttl never cuts it short)."""

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Block until the current write hold is lost (True), or `timeout` seconds pass or it
        is released (False); False at once when none is held."""

    @property
    def fence(self) -> int:
        """The write hold's fence number: greater than that of every earlier write, lock and
        read hold of the name.

        Raises:
            NotHeldError: none is held.
            LockLostError: it was lost.
        """

    @property
    def valid_for(self) -> float:
        """Seconds left of the current write hold's validity; 0.0 when none is held."""

    @property
    def name(self) -> str | bytes:
        """The name (the Redis key of the write side), as given."""

    @property
    def ttl(self) -> float:
        """The lease in seconds, as given to Client.rwlock()."""

    def __enter__(self) -> WriteLock:
        """acquire() with no timeout; returns this object."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None:
        """release(); never suppresses the exception of the with-block."""

@final
class RwLockStatus:
    """The writer and the readers of a read-write lock's name, as Redis had them when
    RwLock.status() asked."""

    @property
    def writer(self) -> LockStatus:
        """The write side's status: a writer, a Lock holder of the name, or any SET NX
        holder, with the last fence number."""

    @property
    def readers(self) -> list[tuple[bytes, float]]:
        """Each live read hold's value and seconds left."""

@final
class Canceller:
    """Ends one redmutex.asyncio acquisition's wait at once (internal)."""

    def __new__(cls) -> Canceller: ...
    def cancel(self) -> None:
        """End the wait: the acquisition gives up and keeps nothing it took meanwhile."""

@final
class Grant:
    """A lease taken for a redmutex.asyncio task, not installed yet (internal)."""

    def discard(self) -> None:
        """Release the lease unless a lock object took it (a network call)."""
