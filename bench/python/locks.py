"""The Python side of the redmutex benchmark (driven by the Rust bench, `make bench`).

    locks.py uncontended --url URL --n N --rounds R [--impl NAME ...]
        acquire + release of a free lock, N samples per implementation (each --impl given,
        or all), taken in R interleaved rounds; prints one JSON object:
        {"python": ..., "impls": {name: {...}}}
        where each entry has "label", "version" and "samples_ns", or "skip" with the reason.
        The asyncio implementations are timed inside one task of an event loop that this
        process keeps for the whole run.

    locks.py child --impl NAME --url URL --key KEY
        the same line protocol as the Rust children: prints "ready", then answers
        "lock" with "locked T"; "unlock" releases silently and "when" then answers
        "unlocked T", T taken just before the release (CLOCK_MONOTONIC ns). An asyncio
        implementation runs in one task under asyncio.run, reading its commands from stdin
        through the loop, so that the loop is idle in its own wait while the lock is awaited.

    locks.py fleet --url URL --threads T --locks L --settle S --window W --patience P
        T threads of one redmutex Client wait on L locks held by another Client; after S
        seconds, Redis's counters (INFO) over W seconds; then every lock is released and each
        thread must take its lock within P seconds. Prints one JSON object: "commands",
        "opened" (counter deltas over the window, less its closing INFO), "blocked", "open",
        "window_s", "all_in_ns" (from the release to the last grant) and "failed".

Implementations, each with its defaults (TTL 30 s, as the Rust rows):
    ping               redis-py PING, the Python client's own round trip (context)
    redis-py           redis.lock.Lock (polls every 100 ms while waiting)
    python-redis-lock  redis_lock.Lock (waits in BLPOP on a signal list)
    redis-py-asyncio   redis.asyncio.lock.Lock (asyncio; polls every 100 ms while waiting)
    redmutex-py        the redmutex Python binding (py/), when it has a Client
    redmutex-py-asyncio  redmutex.asyncio (each network call on a pool thread, awaited)
"""

import argparse
import asyncio
import importlib
import json
import sys
import time

TTL = 30.0
WARMUP = 50


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Skip(Exception):
    """This implementation cannot run here; the message says why."""


def version_of(dist):
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001 - any failure just means "unknown"
        return "?"


def redis_client(url):
    try:
        import redis
    except ImportError as e:
        raise Skip(f"redis-py is not installed ({e}); run bench/python/setup.sh") from e
    return redis.Redis.from_url(url)


class Ping:
    label = "redis-py PING"
    dist = "redis"

    def __init__(self, url, key):
        self.r = redis_client(url)

    def try_lock(self):
        self.r.ping()
        return True

    def unlock(self):
        pass


class RedisPyLock:
    label = "redis-py Lock"
    dist = "redis"

    def __init__(self, url, key):
        self.lock_obj = redis_client(url).lock(key, timeout=TTL)

    def lock(self):
        self.lock_obj.acquire(blocking=True)

    def try_lock(self):
        return self.lock_obj.acquire(blocking=False)

    def unlock(self):
        self.lock_obj.release()


class PythonRedisLock:
    label = "python-redis-lock"
    dist = "python-redis-lock"

    def __init__(self, url, key):
        r = redis_client(url)
        try:
            import redis_lock
        except ImportError as e:
            raise Skip(f"python-redis-lock is not installed ({e}); run bench/python/setup.sh") from e
        self.lock_obj = redis_lock.Lock(r, key, expire=int(TTL))

    def lock(self):
        self.lock_obj.acquire(blocking=True)

    def try_lock(self):
        return self.lock_obj.acquire(blocking=False)

    def unlock(self):
        self.lock_obj.release()


class RedmutexPy:
    label = "redmutex Python binding"
    dist = "redmutex"

    def __init__(self, url, key):
        try:
            import redmutex
        except ImportError as e:
            raise Skip(f"the redmutex package is not installed ({e})") from e
        # The binding (redmutex.Client(url).lock(name, ttl=...)).
        if not hasattr(redmutex, "Client"):
            raise Skip("the redmutex Python binding has no Client yet (py/ is a placeholder)")
        self.lock_obj = redmutex.Client(url).lock(key, ttl=TTL)

    def lock(self):
        self.lock_obj.acquire(blocking=True)

    def try_lock(self):
        return self.lock_obj.acquire(blocking=False)

    def unlock(self):
        self.lock_obj.release()


def _imported(module, missing):
    """`module`, imported; a Skip saying `missing` when it cannot be."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise Skip(f"{missing} ({e})") from e


class _AsyncLockObject:
    """An asyncio lock object (`lock_obj`) with acquire(blocking=...) and release()."""

    is_async = True

    async def lock(self):
        await self.lock_obj.acquire(blocking=True)

    async def try_lock(self):
        return await self.lock_obj.acquire(blocking=False)

    async def unlock(self):
        await self.lock_obj.release()

    async def close(self):
        pass


class AsyncRedisPyLock(_AsyncLockObject):
    """redis-py's asyncio Lock, with its defaults (sleep=0.1 between attempts while waiting)."""

    label = "redis-py asyncio Lock"
    dist = "redis"

    def __init__(self, url, key):
        aioredis = _imported("redis.asyncio", "redis.asyncio cannot be imported; run bench/python/setup.sh")
        self.r = aioredis.Redis.from_url(url)
        self.lock_obj = self.r.lock(key, timeout=TTL)

    async def close(self):
        await self.r.aclose()


class AsyncRedmutexPy(_AsyncLockObject):
    label = "redmutex.asyncio"
    dist = "redmutex"

    def __init__(self, url, key):
        aio = _imported("redmutex.asyncio", "the redmutex package has no asyncio module")
        self.lock_obj = aio.Client(url).lock(key, ttl=TTL)


IMPLS = {
    "ping": Ping,
    "redis-py": RedisPyLock,
    "redis-py-asyncio": AsyncRedisPyLock,
    "python-redis-lock": PythonRedisLock,
    "redmutex-py": RedmutexPy,
    "redmutex-py-asyncio": AsyncRedmutexPy,
}


def is_async(cls):
    return getattr(cls, "is_async", False)


def uncontended(args):
    out = {"python": sys.version.split()[0], "impls": {}}
    runners = {}
    # One loop for the whole run: each asyncio implementation's samples are taken by one task
    # on it, run_until_complete per chunk (the loop is running while they are timed).
    loop = asyncio.new_event_loop()
    for name, cls in IMPLS.items():
        if args.impls and name not in args.impls:
            continue
        entry = {"label": cls.label, "version": version_of(cls.dist)}
        try:
            if is_async(cls):
                impl = loop.run_until_complete(awarm(cls, args.url, f"bench:uncontended:{name}"))
            else:
                impl = cls(args.url, f"bench:uncontended:{name}")
                for _ in range(WARMUP):
                    sample(impl)
            runners[name] = (impl, [])
        except Skip as e:
            entry["skip"] = str(e)
        except Exception as e:  # noqa: BLE001 - report, do not abort the other rows
            entry["skip"] = f"{type(e).__name__}: {e}"
        out["impls"][name] = entry
    per_round = max(1, args.n // args.rounds)
    for _ in range(args.rounds):
        for name, (impl, samples) in runners.items():
            try:
                if is_async(type(impl)):
                    loop.run_until_complete(atimed(impl, per_round, samples))
                    continue
                for _ in range(per_round):
                    t = time.perf_counter_ns()
                    sample(impl)
                    samples.append(time.perf_counter_ns() - t)
            except Exception as e:  # noqa: BLE001
                out["impls"][name]["skip"] = f"{type(e).__name__}: {e}"
    for name, (impl, samples) in runners.items():
        if "skip" not in out["impls"][name]:
            out["impls"][name]["samples_ns"] = samples
        if is_async(type(impl)):
            try:
                loop.run_until_complete(impl.close())
            except Exception:  # noqa: BLE001 - the samples are taken; closing is courtesy
                pass
    loop.close()
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


def sample(impl):
    if not impl.try_lock():
        raise RuntimeError("the lock was not free; another run on the same server?")
    impl.unlock()


async def asample(impl):
    if not await impl.try_lock():
        raise RuntimeError("the lock was not free; another run on the same server?")
    await impl.unlock()


async def awarm(cls, url, key):
    """Makes an asyncio implementation on the running loop (a client may bind to it) and
    warms it up."""
    impl = cls(url, key)
    for _ in range(WARMUP):
        await asample(impl)
    return impl


async def atimed(impl, n, samples):
    for _ in range(n):
        t = time.perf_counter_ns()
        await asample(impl)
        samples.append(time.perf_counter_ns() - t)


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def child(args):
    if is_async(IMPLS[args.impl]):
        return asyncio.run(achild(args))
    try:
        impl = IMPLS[args.impl](args.url, args.key)
    except Exception as e:  # noqa: BLE001
        say(f"error {type(e).__name__}: {e}")
        return 1
    say("ready")
    unlocked_at = 0
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "lock":
            impl.lock()
            say(f"locked {mono_ns()}")
        elif cmd == "unlock":
            unlocked_at = mono_ns()
            impl.unlock()
        elif cmd == "when":
            say(f"unlocked {unlocked_at}")
        elif cmd == "quit":
            break
        else:
            say(f"error unknown command {cmd!r}")
            return 1
    return 0


async def achild(args):
    """The child protocol in one asyncio task: commands come from stdin through the loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        impl = IMPLS[args.impl](args.url, args.key)
    except Exception as e:  # noqa: BLE001
        say(f"error {type(e).__name__}: {e}")
        return 1
    say("ready")
    unlocked_at = 0
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            cmd = line.decode().strip()
            if cmd == "lock":
                await impl.lock()
                say(f"locked {mono_ns()}")
            elif cmd == "unlock":
                unlocked_at = mono_ns()
                await impl.unlock()
            elif cmd == "when":
                say(f"unlocked {unlocked_at}")
            elif cmd == "quit":
                break
            else:
                say(f"error unknown command {cmd!r}")
                return 1
    finally:
        await impl.close()
    return 0


def info_stats(r):
    info = r.info()
    return {
        "commands": info["total_commands_processed"],
        "received": info["total_connections_received"],
        "blocked": info["blocked_clients"],
        "connected": info["connected_clients"],
    }


def fleet(args):
    import threading

    import redmutex

    r = redis_client(args.url)
    names = [f"bench:fleet:py:{args.locks}:{i}" for i in range(args.locks)]
    holder = redmutex.Client(args.url)
    held = [holder.lock(n, ttl=60.0) for n in names]
    for h in held:
        if not h.acquire(blocking=False):
            raise RuntimeError("the lock was not free; another run on the same server?")
    client = redmutex.Client(args.url)
    start = threading.Barrier(args.threads + 1)
    granted, failed = [], []

    def wait(name):
        lock = client.lock(name, ttl=30.0)
        start.wait()
        if lock.acquire(timeout=args.patience):
            granted.append(mono_ns())
            lock.release()
        else:
            failed.append(name)

    threading.stack_size(256 * 1024)
    threads = [
        threading.Thread(target=wait, args=(names[i % args.locks],), daemon=True)
        for i in range(args.threads)
    ]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(args.settle)
    before = info_stats(r)
    begun = time.monotonic()
    time.sleep(args.window)
    after = info_stats(r)
    window = time.monotonic() - begun
    released = mono_ns()
    for h in held:
        h.release()
    for t in threads:
        t.join(args.patience + 10)
    json.dump(
        {
            # Less the INFO that ends the window.
            "commands": after["commands"] - before["commands"] - 1,
            "opened": after["received"] - before["received"],
            "blocked": after["blocked"],
            "open": after["connected"],
            "window_s": window,
            "all_in_ns": max(granted, default=released) - released,
            "failed": len(failed) + sum(t.is_alive() for t in threads),
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("uncontended")
    u.add_argument("--url", required=True)
    u.add_argument("--n", type=int, default=2000)
    u.add_argument("--rounds", type=int, default=10)
    u.add_argument("--impl", action="append", choices=sorted(IMPLS), dest="impls")
    c = sub.add_parser("child")
    c.add_argument("--impl", required=True, choices=sorted(IMPLS))
    c.add_argument("--url", required=True)
    c.add_argument("--key", required=True)
    f = sub.add_parser("fleet")
    f.add_argument("--url", required=True)
    f.add_argument("--threads", type=int, default=1000)
    f.add_argument("--locks", type=int, default=1)
    f.add_argument("--settle", type=float, default=4.0)
    f.add_argument("--window", type=float, default=3.0)
    f.add_argument("--patience", type=float, default=60.0)
    args = p.parse_args()
    if args.cmd == "fleet":
        fleet(args)
        return 0
    if args.cmd == "uncontended":
        uncontended(args)
        return 0
    return child(args)


if __name__ == "__main__":
    sys.exit(main())
