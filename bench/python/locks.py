"""The Python side of the redmutex benchmark (driven by the Rust bench, `make bench`).

    locks.py uncontended --url URL --n N --rounds R
        acquire + release of a free lock, N samples per implementation, taken in R
        interleaved rounds; prints one JSON object: {"python": ..., "impls": {name: {...}}}
        where each entry has "label", "version" and "samples_ns", or "skip" with the reason.

    locks.py child --impl NAME --url URL --key KEY
        the same line protocol as the Rust children: prints "ready", then answers
        "lock" with "locked T"; "unlock" releases silently and "when" then answers
        "unlocked T", T taken just before the release (CLOCK_MONOTONIC ns).

Implementations, each with its defaults (TTL 30 s, as the Rust rows):
    ping               redis-py PING, the Python client's own round trip (context)
    redis-py           redis.lock.Lock (polls every 100 ms while waiting)
    python-redis-lock  redis_lock.Lock (waits in BLPOP on a signal list)
    redmutex-py        the redmutex Python binding (py/), when it has a Client
"""

import argparse
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


IMPLS = {
    "ping": Ping,
    "redis-py": RedisPyLock,
    "python-redis-lock": PythonRedisLock,
    "redmutex-py": RedmutexPy,
}


def uncontended(args):
    out = {"python": sys.version.split()[0], "impls": {}}
    runners = {}
    for name, cls in IMPLS.items():
        entry = {"label": cls.label, "version": version_of(cls.dist)}
        try:
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
                for _ in range(per_round):
                    t = time.perf_counter_ns()
                    sample(impl)
                    samples.append(time.perf_counter_ns() - t)
            except Exception as e:  # noqa: BLE001
                out["impls"][name]["skip"] = f"{type(e).__name__}: {e}"
    for name, (_, samples) in runners.items():
        if "skip" not in out["impls"][name]:
            out["impls"][name]["samples_ns"] = samples
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


def sample(impl):
    if not impl.try_lock():
        raise RuntimeError("the lock was not free; another run on the same server?")
    impl.unlock()


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def child(args):
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("uncontended")
    u.add_argument("--url", required=True)
    u.add_argument("--n", type=int, default=2000)
    u.add_argument("--rounds", type=int, default=10)
    c = sub.add_parser("child")
    c.add_argument("--impl", required=True, choices=sorted(IMPLS))
    c.add_argument("--url", required=True)
    c.add_argument("--key", required=True)
    args = p.parse_args()
    if args.cmd == "uncontended":
        uncontended(args)
        return 0
    return child(args)


if __name__ == "__main__":
    sys.exit(main())
