"""The Semaphore API: threading.BoundedSemaphore semantics, fences, loss, bad input."""

from __future__ import annotations

import threading
import time

import pytest

import redmutex
from conftest import free_port
from sigint import interrupted_within


def holders_key(name: str) -> str:
    return "{" + name + "}:holders"


def test_at_most_n_holders_and_release_frees_one(client, name, r):
    sem = client.semaphore(name, 3)
    assert sem.permits == 3
    assert not sem.owned()
    assert [sem.acquire(blocking=False) for _ in range(3)] == [True, True, True]
    assert sem.owned()
    assert r("ZCARD", holders_key(name)) == 3
    # Another object (another process, as far as Redis can tell) finds no permit left.
    other = client.semaphore(name, 3)
    assert other.acquire(blocking=False) is False
    assert other.acquire(timeout=0.2) is False
    assert sem.acquire(blocking=False) is False
    assert sem.release() is None
    # The timed-out wait above is still announced for a moment (waiters are served before
    # newcomers), so take the freed permit as a waiter too.
    assert other.acquire(timeout=5) is True
    assert other.acquire(blocking=False) is False
    other.release()
    sem.release(2)
    assert not sem.owned()
    assert r("ZCARD", holders_key(name)) == 0


def test_releasing_more_than_acquired_raises_not_held(client, name, r):
    sem = client.semaphore(name, 2)
    with pytest.raises(redmutex.NotHeldError, match="released too many times"):
        sem.release()
    assert sem.acquire()
    # Nothing is released when fewer than n are held.
    with pytest.raises(RuntimeError, match="released too many times"):
        sem.release(2)
    assert sem.owned()
    with pytest.raises(ValueError, match="n must be one or more"):
        sem.release(0)
    with pytest.raises(TypeError):
        sem.release("1")  # type: ignore[arg-type]
    sem.release()
    with pytest.raises(redmutex.NotHeldError):
        sem.release()
    with pytest.raises(redmutex.NotHeldError):
        sem.check()
    with pytest.raises(redmutex.NotHeldError):
        _ = sem.fence


def test_context_manager_holds_one_permit(client, name, r):
    sem = client.semaphore(name, 2)
    with sem as entered:
        assert entered is sem
        assert sem.owned()
        assert r("ZCARD", holders_key(name)) == 1
        with sem:
            assert r("ZCARD", holders_key(name)) == 2
        assert r("ZCARD", holders_key(name)) == 1
    assert not sem.owned()
    assert r("ZCARD", holders_key(name)) == 0


def test_a_waiter_gets_a_released_permit_quickly(client, name):
    holder = client.semaphore(name, 1)
    waiter = client.semaphore(name, 1)
    assert holder.acquire()
    got = threading.Event()
    took = []

    def wait() -> None:
        assert waiter.acquire(timeout=10)
        took.append(time.monotonic())
        got.set()
        waiter.release()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)  # the waiter is blocked by now
    assert not got.is_set()
    released = time.monotonic()
    holder.release()
    assert got.wait(timeout=5)
    t.join()
    assert took[0] - released < 0.5


def test_fences_strictly_increase(client, name):
    sem = client.semaphore(name, 2)
    fences = []
    for _ in range(5):
        with sem:
            fences.append(sem.fence)
    assert sem.acquire() and sem.acquire()
    newest = sem.fence  # the calling thread's most recent permit
    sem.release()
    earlier = sem.fence  # the permit still held
    sem.release()
    assert fences == sorted(set(fences))
    assert fences[-1] < earlier < newest


def test_each_thread_acts_on_its_own_permit(client, name):
    sem = client.semaphore(name, 2)
    assert sem.acquire()
    mine = sem.fence
    theirs = []
    done = threading.Event()
    go = threading.Event()

    def other() -> None:
        assert sem.acquire()
        theirs.append(sem.fence)
        done.set()
        go.wait(5)
        sem.release()

    t = threading.Thread(target=other)
    t.start()
    assert done.wait(5)
    assert sem.fence == mine and theirs[0] > mine
    go.set()
    t.join()
    assert sem.fence == mine
    sem.release()
    assert not sem.owned()


def test_mismatched_permits_raise_and_hold_nothing(client, name, r):
    three = client.semaphore(name, 3)
    assert three.acquire()
    two = client.semaphore(name, 2)
    expected = (
        f'invalid argument: the semaphore "{name}" is held with 3 permits, but this call asked for 2; '
        "every user of one name must give the same count"
    )
    with pytest.raises(ValueError) as info:
        two.acquire(blocking=False)
    assert str(info.value) == expected
    assert not two.owned()
    assert r("ZCARD", holders_key(name)) == 1
    three.release()
    # Once no permit is held, another count may be set.
    with two:
        assert two.status().permits == 2


@pytest.mark.parametrize("permits", [0, 1025, -1, 2**70])
def test_permits_out_of_range(client, name, r, permits):
    with pytest.raises(ValueError, match=r"a semaphore must have 1 to 1024 permits, got "):
        client.semaphore(name, permits)
    assert r("EXISTS", holders_key(name)) == 0


@pytest.mark.parametrize("permits", ["3", 3.0, True, None])
def test_permits_of_a_wrong_type(client, name, permits):
    with pytest.raises(TypeError, match="permits must be an int"):
        client.semaphore(name, permits)  # type: ignore[arg-type]


def test_bad_names_and_options(client, r):
    with pytest.raises(ValueError, match="1 to 512 bytes"):
        client.semaphore("x" * 513, 2)
    with pytest.raises(ValueError, match="1 to 512 bytes"):
        client.semaphore("", 2)
    with pytest.raises(TypeError, match="str or bytes"):
        client.semaphore(5, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        client.semaphore("n", 2, ttl=-1)
    with pytest.raises(TypeError, match="ttl"):
        client.semaphore("n", 2, ttl="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_lost"):
        client.semaphore("n", 2, on_lost=3)  # type: ignore[arg-type]
    assert r("EXISTS", "{n}:holders") == 0


def test_refused_on_several_masters(name):
    # Refused before anything is sent: nothing needs to listen there.
    client = redmutex.Client([f"redis://127.0.0.1:{free_port()}" for _ in range(3)])
    sem = client.semaphore(name, 2)
    with pytest.raises(ValueError):
        sem.acquire(blocking=False)
    assert not sem.owned()


def test_extend_and_valid_for(client, name, r):
    sem = client.semaphore(name, 2, ttl=2.0)
    with pytest.raises(redmutex.NotHeldError):
        sem.extend(5)
    with sem:
        assert 0 < sem.valid_for <= 2.0
        sem.extend(60)
        assert sem.valid_for > 50
    assert sem.valid_for == 0.0


def test_on_lost_and_wait_lost(client, name, r):
    lost = threading.Event()
    sem = client.semaphore(name, 2, ttl=0.3, on_lost=lost.set)
    assert sem.acquire()
    assert sem.wait_lost(timeout=0.1) is False
    r("DEL", holders_key(name))
    assert lost.wait(timeout=5)
    assert sem.wait_lost(timeout=5) is True
    assert not sem.owned()
    with pytest.raises(redmutex.LockLostError):
        sem.check()
    with pytest.raises(redmutex.LockLostError):
        _ = sem.fence
    with pytest.raises(redmutex.LockLostError):
        sem.release()
    with pytest.raises(redmutex.NotHeldError):
        sem.release()


def test_status_lists_the_holders(client, name):
    sem = client.semaphore(name, 3)
    free = sem.status()
    assert isinstance(free, redmutex.SemaphoreStatus)
    assert (free.permits, free.holders) == (None, [])
    with sem:
        held = sem.status()
        assert held.permits == 3
        assert len(held.holders) == 1
        value, left = held.holders[0]
        assert isinstance(value, bytes) and 0 < left <= 30.0
        assert held.fence == sem.fence
        assert repr(held).startswith("SemaphoreStatus(permits=3, holders=[(b'")


def test_locked_when_no_permit_is_free(client, name, redis_server):
    sem = client.semaphore(name, 2)
    assert sem.locked() is False
    assert sem.acquire(blocking=False)
    assert sem.locked() is False, "one permit of two is free"
    # Another process's permit counts as well as this object's.
    other = redmutex.Client(redis_server.url).semaphore(name, 2)
    assert other.acquire(blocking=False)
    assert sem.locked() is True and other.locked() is True
    assert sem.acquire(blocking=False) is False
    other.release()
    assert sem.locked() is False
    sem.release()
    assert sem.locked() is False


def test_properties_and_repr(client, name):
    sem = client.semaphore(name.encode(), 4, ttl=5)
    assert sem.name == name.encode()
    assert sem.ttl == 5.0
    assert sem.permits == 4
    assert repr(sem).startswith("<redmutex.Semaphore name=b'")


def test_sigint_interrupts_a_waiting_acquire_and_leaves_nothing_held(client, name, r):
    holder = client.semaphore(name, 1)
    waiter = client.semaphore(name, 1)
    assert holder.acquire()
    latency = interrupted_within(waiter.acquire, 0.2)
    assert latency < 0.1, f"KeyboardInterrupt {latency * 1000:.0f} ms after SIGINT"
    assert not waiter.owned()
    holder.release()
    assert waiter.acquire(timeout=5)
    waiter.release()
    assert r("ZCARD", holders_key(name)) == 0


def test_on_a_cluster(redis_cluster, name):
    client = redmutex.Client(redis_cluster.url)
    sem = client.semaphore(name, 2)
    assert sem.acquire(blocking=False) and sem.acquire(blocking=False)
    assert client.semaphore(name, 2).acquire(blocking=False) is False
    sem.release(2)
    with client.rwlock(name).read_lock() as read, client.rwlock(name).read_lock():
        assert read.owned()
