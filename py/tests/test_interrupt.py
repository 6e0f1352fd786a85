"""Ctrl-C ends every call that can wait, within 100 ms: not only a blocking acquire, but
release(), `with` exit, extend(), locked(), status() and the first connection, while Redis
does not answer (here: a frozen redis-server and a long connect_timeout)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import redmutex
from conftest import RedisServer, start_redis, stop
from sigint import interrupted_within


@contextlib.contextmanager
def sigusr1_after(delay: float) -> Iterator[None]:
    """Sends this process SIGUSR1 `delay` seconds into the block, from another thread."""

    def poke() -> None:
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGUSR1)

    t = threading.Thread(target=poke)
    t.start()
    try:
        yield
    finally:
        t.join(timeout=10)


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


def _thread_names() -> list[str]:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass  # ended meanwhile
    return names


def test_a_call_on_the_main_thread_waits_there_with_no_helper_thread(redis_server, name, r):
    """The main thread's waiting acquire waits in place: Ctrl-C reaches it through the signal
    pipe, so no thread is started to wait for it (and none is left behind)."""
    r("SET", name, "foreign", "PX", 700)
    lock = redmutex.Client(redis_server.url).lock(name)
    seen: list[list[str]] = []

    def look() -> None:
        time.sleep(0.3)
        seen.append(_thread_names())

    t = threading.Thread(target=look, name="look")
    t.start()
    try:
        assert lock.acquire(timeout=10)
    finally:
        t.join(timeout=10)
    lock.release()
    assert seen, "the look did not happen"
    assert "redmutex-call" not in seen[0], seen[0]
    assert "redmutex-call" not in _thread_names()


def test_a_signal_whose_handler_does_not_raise_leaves_the_call_to_finish(own_server):
    """A signal with a handler that returns (SIGUSR1 here) wakes the call's wait, runs the
    handler there, and the call goes on: a round to a frozen server still gets its answer
    once the server wakes, within its node timeout."""
    client = redmutex.Client(own_server.url, connect_timeout=10.0, node_timeout=5.0)
    lock = client.lock("go-on")
    assert lock.acquire(blocking=False)
    lock.release()
    handled: list[float] = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: handled.append(time.monotonic()))
    os.kill(own_server.process.pid, signal.SIGSTOP)

    def poke_then_resume() -> None:
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.3)
        os.kill(own_server.process.pid, signal.SIGCONT)

    t = threading.Thread(target=poke_then_resume)
    try:
        t.start()
        assert lock.acquire(blocking=False), "the round did not go on after the handler"
    finally:
        t.join(timeout=10)
        os.kill(own_server.process.pid, signal.SIGCONT)
        signal.signal(signal.SIGUSR1, previous)
    assert len(handled) == 1, handled
    lock.release()


def test_a_signal_handler_may_use_the_library_while_a_call_waits(redis_server, name, r):
    """A handler that runs inside a waiting call (the signal wakes the call's wait, and its
    handlers run there) may itself take and release another lock: that inner call runs to
    its end, and the outer call goes on and gets its lock."""
    r("SET", name, "foreign", "PX", 800)
    client = redmutex.Client(redis_server.url)
    lock, other = client.lock(name), client.lock(name + ":other")
    inner: list[bool] = []

    def handler(*_: object) -> None:
        inner.append(other.acquire(blocking=False))
        other.release()

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with sigusr1_after(0.2):
            assert lock.acquire(timeout=10)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    lock.release()
    assert inner == [True]


def test_a_wake_up_descriptor_set_before_the_call_gets_the_signals_it_took(redis_server, name, r):
    """A descriptor set with signal.set_wakeup_fd before the call (an event loop's) is set
    back after it, and receives the numbers of the signals that came during the call."""
    r("SET", name, "foreign", "PX", 400)
    lock = redmutex.Client(redis_server.url).lock(name)
    theirs_r, theirs_w = os.pipe()
    os.set_blocking(theirs_w, False)
    os.set_blocking(theirs_r, False)
    previous_handler = signal.signal(signal.SIGUSR1, lambda *_: None)
    previous_fd = signal.set_wakeup_fd(theirs_w)
    try:
        with sigusr1_after(0.1):
            assert lock.acquire(timeout=10)
        assert signal.set_wakeup_fd(previous_fd) == theirs_w, "the descriptor was not set back"
        assert os.read(theirs_r, 64) == bytes([signal.SIGUSR1])
    finally:
        signal.signal(signal.SIGUSR1, previous_handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(theirs_r)
        os.close(theirs_w)
    lock.release()
