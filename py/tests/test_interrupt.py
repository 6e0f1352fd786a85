"""Ctrl-C ends every call that can wait, within 100 ms: not only a blocking acquire, but
release(), `with` exit, extend(), locked(), status() and the first connection, while Redis
does not answer (here: a frozen redis-server and a long connect_timeout)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import redmutex
from conftest import RedisServer, start_redis, stop
from sigint import interrupted_within


@pytest.fixture
def own_server(tmp_path) -> Iterator[RedisServer]:
    """A server of this test's own, which the test may freeze."""
    server = start_redis(str(tmp_path))
    try:
        yield server
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        stop(server.process)


CALLS: dict[str, Callable[[redmutex.Lock], object]] = {
    "release": lambda lock: lock.release(),
    "__exit__": lambda lock: lock.__exit__(None, None, None),
    "extend": lambda lock: lock.extend(30.0),
    "locked": lambda lock: lock.locked(),
    "status": lambda lock: lock.status(),
}


@pytest.mark.parametrize("what", sorted(CALLS))
def test_sigint_interrupts_a_call_while_redis_is_frozen(own_server, what):
    client = redmutex.Client(own_server.url, connect_timeout=10.0)
    lock = client.lock("interrupt-me", ttl=30.0)
    assert lock.acquire()
    os.kill(own_server.process.pid, signal.SIGSTOP)
    try:
        latency = interrupted_within(lambda: CALLS[what](lock), 0.1)
    finally:
        os.kill(own_server.process.pid, signal.SIGCONT)
    assert latency < 0.1, f"KeyboardInterrupt {latency * 1000:.0f} ms after SIGINT"


@pytest.mark.parametrize("blocking", [True, False])
def test_sigint_interrupts_the_first_connection(own_server, blocking):
    client = redmutex.Client(own_server.url, connect_timeout=10.0)
    lock = client.lock("interrupt-me-first")
    os.kill(own_server.process.pid, signal.SIGSTOP)
    try:
        latency = interrupted_within(lambda: lock.acquire(blocking=blocking), 0.3)
    finally:
        os.kill(own_server.process.pid, signal.SIGCONT)
    assert latency < 0.1, f"KeyboardInterrupt {latency * 1000:.0f} ms after SIGINT"
    assert not lock.owned()


def _blpops(info: object) -> int:
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("cmdstat_blpop:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_a_waiting_acquire_blocks_on_redis_for_the_cores_wait_cap(redis_server, name, r):
    """A blocking acquire on the main thread waits on Redis in blocks of the core's wait cap
    (250 ms), not of the 50 ms it took for Ctrl-C to be noticed before: Ctrl-C now ends the
    wait at once through a wake-up descriptor. Over one second of waiting for a lock whose
    holder never signals, a handful of waits (at most 8), not twenty."""
    r("SET", name, "foreign", "PX", 1600)
    client = redmutex.Client(redis_server.url)
    lock = client.lock(name)
    counted: list[int] = []

    def count() -> None:
        side = redis_server.resp()
        try:
            time.sleep(0.3)
            side("CONFIG", "RESETSTAT")
            time.sleep(1.0)
            counted.append(_blpops(side("INFO", "commandstats")))
        finally:
            side.close()

    t = threading.Thread(target=count)
    t.start()
    try:
        assert lock.acquire(timeout=10)
    finally:
        t.join(timeout=10)
    lock.release()
    assert counted, "the count did not finish"
    assert counted[0] <= 8, f"{counted[0]} waits in one second"
