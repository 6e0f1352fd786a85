"""Client.list() and Client.force_unlock(): every held or waited-for lock whose name matches
is listed with its holds, fence and waiters (and nothing else is); a lock whose holder was
killed with a 1 h lease is broken, and its waiting thread gets it at once with a larger
fence; bad input raises before anything is sent."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

import redmutex

# A process that holds `name` with a 1 h lease until it is killed.
STUCK_HOLDER = """
import sys
import redmutex
lock = redmutex.Client(sys.argv[1]).lock(sys.argv[2], ttl=3600.0)
assert lock.acquire(timeout=10)
print("locked", lock.fence, flush=True)
sys.stdin.read()
"""


def _until(pred, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_a_held_lock_is_listed_with_its_holder(client, name):
    lock = client.lock(name, ttl=30.0)
    assert lock.acquire()
    locks = client.list(name)
    assert len(locks) == 1
    listed = locks[0]
    assert isinstance(listed, redmutex.ListedLock)
    assert listed.name == name
    assert (listed.fence, listed.waiters, listed.nodes) == (lock.fence, 0, 1)
    assert listed.disagree is False
    assert len(listed.holds) == 1
    hold = listed.holds[0]
    assert isinstance(hold, redmutex.ListedHold)
    assert (hold.kind, hold.holder, hold.nodes) == ("exclusive", lock.status().holder, 1)
    assert hold.ttl is not None and 0 < hold.ttl <= 30.0
    assert repr(name) in repr(listed) and "kind='exclusive'" in repr(listed)

    # A bytes pattern gives bytes names; the default pattern matches every name.
    assert [lk.name for lk in client.list(name.encode())] == [name.encode()]
    assert name in [lk.name for lk in client.list()]
    assert client.list(name + ":nothing*") == []

    lock.release()
    assert client.list(name) == []


def test_read_holds_permits_and_names_that_are_not_utf8(client, name):
    read = client.rwlock(name + ":a-rw").read_lock()
    permit = client.semaphore(name + ":b-sem", 2)
    binary = client.lock(name.encode() + b":c-\xff")
    assert read.acquire() and permit.acquire() and binary.acquire()
    locks = client.list(name + ":*")
    assert [lk.name for lk in locks] == [name + ":a-rw", name + ":b-sem",
                                         name.encode() + b":c-\xff"]
    assert [lk.holds[0].kind for lk in locks] == ["read", "permit", "exclusive"]
    for lk in locks:
        with pytest.raises(AttributeError):
            lk.fence = 0  # type: ignore[misc]
    read.release()
    permit.release()
    binary.release()


def test_force_unlock_breaks_a_killed_holders_lock_for_a_waiting_thread(redis_server, client,
                                                                        name):
    with subprocess.Popen(
        [sys.executable, "-c", STUCK_HOLDER, redis_server.url, name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            line = holder.stdout.readline()
        finally:
            holder.kill()
    assert line.startswith("locked "), line
    stuck_fence = int(line.split()[1])
    (stuck,) = client.list(name)
    assert stuck.holds[0].ttl is not None and stuck.holds[0].ttl > 3000

    waiter = redmutex.Client(redis_server.url).lock(name)
    granted: list[float] = []

    def wait() -> None:
        if waiter.acquire(timeout=60):
            granted.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        assert _until(lambda: client.list(name)[0].waiters > 0), client.list(name)
        broken_at = time.monotonic()
        removed = client.force_unlock(name)
    finally:
        thread.join(timeout=60)
    assert [(h.kind, h.holder, h.nodes) for h in removed] == [
        ("exclusive", stuck.holds[0].holder, 1)]
    assert removed[0].ttl is not None and removed[0].ttl > 3000
    # Woken by the forced release, not by the 1 h lease.
    assert granted and granted[0] - broken_at < 5.0
    assert waiter.fence > stuck_fence
    (now,) = client.list(name)
    assert now.holds[0].holder == waiter.status().holder
    waiter.release()
    assert client.force_unlock(name) == []
    assert client.list(name) == []


def test_bad_input_raises_before_anything_is_sent(dead_url):
    client = redmutex.Client(dead_url)
    for bad in (5, None, ["*"]):
        with pytest.raises(TypeError):
            client.force_unlock(bad)  # type: ignore[arg-type]
    for bad in (5, ["*"], bytearray(b"*")):
        with pytest.raises(TypeError):
            client.list(bad)  # type: ignore[arg-type]
    for pattern in ("", b"", "*" * 2049):
        with pytest.raises(ValueError):
            client.list(pattern)
    for lock_name in ("", b"", "x" * 513):
        with pytest.raises(ValueError):
            client.force_unlock(lock_name)


def test_unreachable_servers_raise(dead_url):
    client = redmutex.Client(dead_url, connect_timeout=0.2)
    with pytest.raises((redmutex.LockConnectionError, redmutex.NoQuorumError)):
        client.list()
    with pytest.raises((redmutex.LockConnectionError, redmutex.NoQuorumError)):
        client.force_unlock("x")
