"""Ctrl-C ends every call that can wait, within 100 ms: not only a blocking acquire, but
release(), `with` exit, extend(), locked(), status() and the first connection, while Redis
does not answer (here: a frozen redis-server and a long connect_timeout)."""

from __future__ import annotations

import os
import signal
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
