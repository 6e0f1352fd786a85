"""Client.stats(): each figure moves when what it counts happens through the Python API (a
grant, a refusal, a wait that runs out, a release, a loss, a thread waiting), with its type."""

from __future__ import annotations

import threading
import time

import redmutex


def _until(pred, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_grants_refusals_timeouts_and_releases_are_counted(redis_server, name):
    client = redmutex.Client(redis_server.url)
    s = client.stats()
    assert isinstance(s, redmutex.ClientStats)
    assert (s.acquired, s.refused, s.timed_out, s.failed, s.held_now) == (0, 0, 0, 0, 0)
    assert isinstance(s.wait_seconds, redmutex.Histogram)
    assert len(s.wait_seconds.bounds) == 17 and len(s.wait_seconds.buckets) == 18
    assert s.wait_seconds.bounds[0] == 0.0001 and s.wait_seconds.bounds[-1] == 60.0

    lock = client.lock(name, ttl=30.0)
    assert lock.acquire()
    s = client.stats()
    assert (s.acquired, s.held_now, s.wait_seconds.count) == (1, 1, 1)
    assert not client.lock(name).acquire(blocking=False)
    assert not client.lock(name).acquire(timeout=0.05)
    s = client.stats()
    assert (s.refused, s.timed_out, s.failed, s.waiting_now) == (1, 1, 0, 0)

    lock.release()
    s = client.stats()
    assert (s.held_now, s.lost) == (0, 0)
    assert s.held_seconds.count == 1 and s.held_seconds.sum > 0
    assert sum(s.held_seconds.buckets) == 1


def test_a_loss_is_counted_with_its_reason(redis_server, name, r):
    """The key deleted behind the holder's back is found gone at the next renewal."""
    client = redmutex.Client(redis_server.url)
    lock = client.lock(name, ttl=0.3)
    assert lock.acquire()
    r("DEL", name)
    assert lock.wait_lost(timeout=5.0)
    s = client.stats()
    assert s.lost == 1
    assert s.lost_by == {
        "another_owner": 0,
        "gone": 1,
        "nodes_down": 0,
        "validity_ran_out": 0,
        "max_hold": 0,
    }
    assert s.held_now == 0 and s.renewal_failures >= 1


def test_a_waiting_thread_is_counted_while_it_waits(redis_server, name):
    holder = redmutex.Client(redis_server.url).lock(name, ttl=30.0)
    assert holder.acquire()
    client = redmutex.Client(redis_server.url)
    got: list[bool] = []

    def wait() -> None:
        lock = client.lock(name)
        got.append(lock.acquire(timeout=30))
        lock.release()

    t = threading.Thread(target=wait)
    t.start()
    try:
        assert _until(lambda: client.stats().waiting_now == 1), client.stats()
    finally:
        holder.release()
        t.join(timeout=30)
    assert got == [True]
    s = client.stats()
    assert (s.waiting_now, s.acquired, s.held_now) == (0, 1, 0)
    assert s.wait_seconds.count == 1


def test_the_librarys_log_records_reach_python_logging(dead_url, caplog):
    """A first connection that fails is logged (debug) by the library, under "redmutex"."""
    import logging

    caplog.set_level(logging.DEBUG, logger="redmutex")
    client = redmutex.Client(dead_url, connect_timeout=0.1)
    try:
        client.lock("logged").acquire(blocking=False)
    except redmutex.LockError:
        pass
    records = [r for r in caplog.records if r.name.startswith("redmutex")]
    assert any("first connection failed" in r.getMessage() for r in records), caplog.text
    assert client.stats().failed == 1
