"""An acquisition belongs to the thread that made it, and its on_lost call to it alone."""

from __future__ import annotations

import threading

import pytest

import redmutex


def _lose(lock: redmutex.Lock) -> None:
    """Waits (boundedly) until the calling thread's acquisition of `lock` is lost."""
    assert lock.wait_lost(5) is True


@pytest.mark.parametrize("how", ["release", "__exit__"])
def test_a_lost_holder_never_releases_the_next_holders_lock(client, name, r, how):
    lock = client.lock(name, ttl=0.3, auto_renew=False)
    b_holds = threading.Event()
    b_may_leave = threading.Event()
    b_saw: dict[str, object] = {}

    def thread_b() -> None:
        assert lock.acquire(timeout=5)
        b_saw["token"] = r("GET", name)
        b_holds.set()
        assert b_may_leave.wait(10)
        b_saw["owned"] = lock.owned()
        b_saw["fence"] = lock.fence
        lock.release()

    assert lock.acquire()  # thread A: this test's thread
    a_fence = lock.fence
    _lose(lock)  # the lease ran out: A's lock is lost
    b = threading.Thread(target=thread_b)
    b.start()
    try:
        assert b_holds.wait(10)
        assert lock.owned() is False  # A's own acquisition, not B's
        with pytest.raises(redmutex.LockLostError):
            lock.fence
        with pytest.raises(redmutex.LockLostError):
            if how == "release":
                lock.release()
            else:
                lock.__exit__(None, None, None)
        # B's lock is untouched in Redis, and B still holds it.
        assert r("GET", name) == b_saw["token"]
        assert r("PTTL", name) > 0
    finally:
        b_may_leave.set()
        b.join(timeout=10)
    assert not b.is_alive()
    assert b_saw["owned"] is True
    assert b_saw["fence"] > a_fence
    assert r("EXISTS", name) == 0  # B released its own


def test_a_thread_without_an_acquisition_acts_on_the_latest(client, name, r):
    """threading.Lock semantics stay: a timer thread may release what another acquired."""
    lock = client.lock(name)
    assert lock.acquire()
    timer = threading.Timer(0, lock.release)
    timer.start()
    timer.join(timeout=5)
    assert r("EXISTS", name) == 0
    assert not lock.owned()


def test_on_lost_never_runs_after_release(client, name, r):
    """A loss queued behind a slow callback must not be reported after release()."""
    busy = threading.Event()
    unblock = threading.Event()
    called = threading.Event()

    def slow() -> None:
        busy.set()
        unblock.wait(10)

    first = client.lock(name + ":first", ttl=0.3, on_lost=slow)
    second = client.lock(name, ttl=0.3, on_lost=called.set)
    try:
        assert first.acquire() and second.acquire()
        r("SET", name + ":first", "intruder")
        assert busy.wait(5)  # the callback thread is now busy in slow()
        r("SET", name, "intruder")
        assert second.wait_lost(5) is True  # its call is queued behind slow()
        with pytest.raises(redmutex.LockLostError):
            second.release()
    finally:
        unblock.set()
    # The queue drains right after slow() returns; nothing may be called for `second`.
    assert not called.wait(1.0)
    with pytest.raises(redmutex.LockLostError):
        first.release()
