"""The Lock API: threading.Lock semantics, fencing, renewal, loss and threads."""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest

import redmutex


def test_acquire_release_owned_locked(client, name, r):
    lock = client.lock(name)
    assert not lock.owned()
    assert not lock.locked()
    assert lock.acquire() is True
    assert lock.owned()
    assert lock.locked()
    assert r("GET", name).startswith(b"")
    assert 0 < r("PTTL", name) <= 30_000
    assert lock.release() is None
    assert not lock.owned()
    assert not lock.locked()
    assert r("EXISTS", name) == 0


def test_locked_sees_other_holders_and_owned_does_not(client, name, r):
    mine = client.lock(name)
    r("SET", name, "someone-else", "PX", 5000)
    assert mine.locked()
    assert not mine.owned()
    assert mine.acquire(blocking=False) is False
    r("DEL", name)


def test_status_names_the_holder_its_lease_and_the_fence(client, name, r):
    lock = client.lock(name, ttl=30.0)
    free = lock.status()
    assert isinstance(free, redmutex.LockStatus)
    assert (free.holder, free.ttl, free.fence) == (None, None, 0)
    with lock:
        held = lock.status()
        assert held.holder == r("GET", name)
        assert 25.0 < held.ttl <= 30.0
        assert held.fence == lock.fence
        assert repr(held).startswith("LockStatus(holder=b'")
    after = lock.status()
    assert (after.holder, after.ttl, after.fence) == (None, None, held.fence)
    # Any client's SET NX value is shown as it is; one without expiry has no ttl.
    r("SET", name, b"cron\xff")
    assert (lock.status().holder, lock.status().ttl) == (b"cron\xff", None)
    r("DEL", name)
    with pytest.raises(AttributeError):
        held.fence = 1  # type: ignore[misc]


def test_try_and_timeout(client, name):
    holder = client.lock(name)
    assert holder.acquire()
    other = client.lock(name)
    assert other.acquire(blocking=False) is False
    assert other.acquire(timeout=0) is False
    t0 = time.monotonic()
    assert other.acquire(timeout=0.3) is False
    assert 0.3 <= time.monotonic() - t0 < 2.0
    holder.release()
    # A waiter that just gave up is still announced, and a release leaves the lock to
    # announced waiters for a moment: so wait a little rather than try once.
    assert other.acquire(timeout=1) is True
    other.release()


def test_blocking_acquire_is_woken_by_release(client, name):
    holder = client.lock(name)
    assert holder.acquire()
    threading.Timer(0.2, holder.release).start()
    waiter = client.lock(name)
    t0 = time.monotonic()
    assert waiter.acquire(timeout=-1)  # -1: forever, as with threading.Lock
    assert time.monotonic() - t0 < 2.0
    waiter.release()


def test_not_reentrant_like_threading_lock(client, name):
    lock = client.lock(name)
    assert lock.acquire()
    assert lock.acquire(timeout=0.1) is False
    assert lock.owned()
    lock.release()


def test_release_unheld_raises_not_held(client, name):
    lock = client.lock(name)
    with pytest.raises(redmutex.NotHeldError):
        lock.release()
    lock.acquire()
    lock.release()
    with pytest.raises(RuntimeError):  # as threading.Lock().release() raises
        lock.release()


def test_fence_increases_and_needs_the_lock(client, name):
    lock = client.lock(name)
    with pytest.raises(redmutex.NotHeldError):
        lock.fence
    fences = []
    for _ in range(3):
        with lock:
            fences.append(lock.fence)
    assert fences == sorted(set(fences))
    assert fences[0] >= 1
    with pytest.raises(redmutex.NotHeldError):
        lock.fence


def test_fencing_off_gives_zero(client, name, r):
    lock = client.lock(name, fencing=False)
    with lock:
        assert lock.fence == 0
    assert r("EXISTS", "{" + name + "}:fence") == 0


def test_str_and_bytes_names_are_the_same_key(client, r):
    text = "test:ünïcode:lock"
    as_str = client.lock(text)
    as_bytes = client.lock(text.encode())
    assert as_str.name == text
    assert as_bytes.name == text.encode()
    with as_str:
        assert r("EXISTS", text.encode()) == 1
        assert as_bytes.acquire(blocking=False) is False
    assert as_bytes.acquire(blocking=False) is True
    as_bytes.release()


def test_extend_sets_the_lease(client, name, r):
    lock = client.lock(name, ttl=2.0)
    with pytest.raises(redmutex.NotHeldError):
        lock.extend(5)
    with lock:
        assert r("PTTL", name) <= 2000
        lock.extend(60)
        assert 50_000 < r("PTTL", name) <= 60_000
        assert lock.valid_for > 50
    assert lock.valid_for == 0.0


def test_renewal_keeps_a_short_lease(client, name, r):
    lock = client.lock(name, ttl=0.3)
    with lock:
        value = r("GET", name)
        time.sleep(1.0)
        assert lock.owned()
        lock.check()
        assert r("GET", name) == value
        assert 0 < lock.valid_for <= 0.3


def test_without_auto_renew_the_lease_ends(client, name, r):
    lock = client.lock(name, ttl=0.3, auto_renew=False)
    assert lock.acquire()
    assert lock.wait_lost(timeout=3) is True
    assert not lock.owned()
    # The local validity ends a drift allowance before Redis expires the key.
    time.sleep(0.05)
    assert r("EXISTS", name) == 0
    with pytest.raises(redmutex.LockLostError):
        lock.release()


def test_max_hold_ends_renewal(client, name):
    lost = threading.Event()
    lock = client.lock(name, ttl=0.2, max_hold=0.5, on_lost=lost.set)
    t0 = time.monotonic()
    assert lock.acquire()
    assert lost.wait(timeout=5)
    assert 0.4 < time.monotonic() - t0 < 3
    assert not lock.owned()
    with pytest.raises(redmutex.LockLostError):
        lock.release()


def test_wait_lost(client, name, r):
    lock = client.lock(name, ttl=0.5)
    assert lock.wait_lost(0.1) is False  # not acquired
    assert lock.acquire()
    t0 = time.monotonic()
    assert lock.wait_lost(0.3) is False  # renewed meanwhile
    assert time.monotonic() - t0 >= 0.3
    result = []
    watchdog = threading.Thread(target=lambda: result.append(lock.wait_lost(10)))
    watchdog.start()
    time.sleep(0.1)
    r("SET", name, "intruder")
    watchdog.join(timeout=5)
    assert result == [True]
    with pytest.raises(redmutex.LockLostError):
        lock.release()


def test_wait_lost_returns_false_on_release(client, name):
    lock = client.lock(name)
    assert lock.acquire()
    result = []
    watchdog = threading.Thread(target=lambda: result.append(lock.wait_lost(10)))
    watchdog.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    lock.release()
    watchdog.join(timeout=5)
    assert result == [False]
    assert time.monotonic() - t0 < 1


def test_on_lost_not_called_after_release(client, name):
    lost = threading.Event()
    lock = client.lock(name, ttl=0.2, on_lost=lost.set)
    with lock:
        pass
    assert not lost.wait(0.5)


def test_on_lost_exception_goes_to_unraisablehook(client, name, r, monkeypatch):
    seen = []
    done = threading.Event()

    def hook(unraisable) -> None:
        seen.append(unraisable.exc_type)
        done.set()

    monkeypatch.setattr(sys, "unraisablehook", hook)

    def callback() -> None:
        raise ValueError("from on_lost")

    lock = client.lock(name, ttl=0.3, on_lost=callback)
    assert lock.acquire()
    r("SET", name, "intruder")
    assert done.wait(timeout=5)
    assert seen == [ValueError]


def test_threads_with_their_own_locks_never_overlap(client, name):
    inside = 0
    most = 0
    total = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most, total
        lock = client.lock(name)
        for _ in range(15):
            with lock:
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.001)
                with guard:
                    inside -= 1
                    total += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert total == 60
    assert most == 1


def test_threads_sharing_one_lock(client, name):
    lock = client.lock(name)
    inside = 0
    most = 0
    total = 0

    def work() -> None:
        nonlocal inside, most, total
        for _ in range(10):
            with lock:
                inside += 1
                most = max(most, inside)
                time.sleep(0.001)
                inside -= 1
                total += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert (total, most) == (40, 1)


def test_dropping_a_held_lock_releases_it(client, name, r):
    lock = client.lock(name)
    assert lock.acquire()
    del lock
    gc.collect()
    assert r("EXISTS", name) == 0


def test_a_cycle_through_on_lost_is_collected_and_released(client, name, r):
    def make() -> None:
        lock = client.lock(name, on_lost=lambda: lock.name)
        assert lock.acquire()

    make()
    assert r("EXISTS", name) == 1
    gc.collect()
    assert r("EXISTS", name) == 0


def test_repr_and_properties(client, name, redis_server):
    lock = client.lock(name, ttl=2.5)
    assert lock.ttl == 2.5
    assert repr(lock) == f"<redmutex.Lock name={name!r} ttl=2.5 owned=False>"
    assert client.nodes == [redis_server.url]
    assert client.quorum == 1
    # What each node runs, learned at its first connection.
    assert client.servers == [None]
    with lock:
        pass
    assert len(client.servers) == 1
    assert client.servers[0] is not None
    assert client.servers[0].startswith(("Redis ", "Valkey "))
    assert redis_server.url in repr(client)
    assert isinstance(lock, redmutex.Lock)


def test_credentials_are_not_shown(redis_server):
    url = f"redis://user:s3cret@127.0.0.1:{redis_server.port}"
    client = redmutex.Client(url)
    assert "s3cret" not in repr(client)
    assert all("s3cret" not in n for n in client.nodes)
