"""The RwLock API: readers coexist, a writer (or a plain Lock) excludes them, and each side
is a lock object like Lock."""

from __future__ import annotations

import threading
import time

import pytest

import redmutex
from sigint import interrupted_within


def readers_key(name: str) -> str:
    return "{" + name + "}:readers"


def test_the_sides_are_lock_objects(client, name):
    rw = client.rwlock(name, ttl=10.0)
    assert isinstance(rw, redmutex.RwLock)
    read, write = rw.read_lock(), rw.write_lock()
    assert isinstance(read, redmutex.ReadLock)
    assert isinstance(write, redmutex.WriteLock)
    assert rw.read_lock() is read and rw.write_lock() is write
    assert rw.name == read.name == write.name == name
    assert rw.ttl == read.ttl == write.ttl == 10.0
    assert repr(rw).startswith("<redmutex.RwLock name='")
    assert repr(read).startswith("<redmutex.ReadLock name='")


def test_readers_coexist_across_threads(client, name, r):
    rw = client.rwlock(name)
    both = threading.Barrier(2, timeout=5)
    held_together = []
    one_connection = threading.Lock()

    def reader() -> None:
        with rw.read_lock():
            both.wait()  # both threads hold a read lock here
            with one_connection:
                held_together.append(r("ZCARD", readers_key(name)))
            both.wait()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert held_together == [2, 2]
    assert r("ZCARD", readers_key(name)) == 0


def test_writer_excluded_while_readers_hold_and_vice_versa(client, name):
    rw = client.rwlock(name)
    other = client.rwlock(name)
    assert rw.read_lock().acquire()
    assert rw.read_lock().locked()
    assert not rw.write_lock().locked()
    assert other.write_lock().acquire(blocking=False) is False
    assert other.write_lock().acquire(timeout=0.2) is False
    rw.read_lock().release()
    # A release keeps the freed lock a moment for the waiter it wakes (the timed-out wait
    # above), so take it as a waiter.
    assert other.write_lock().acquire(timeout=5) is True
    assert other.write_lock().locked()
    assert rw.read_lock().acquire(blocking=False) is False
    assert rw.read_lock().acquire(timeout=0.2) is False
    assert rw.write_lock().acquire(blocking=False) is False
    other.write_lock().release()
    assert rw.read_lock().acquire(timeout=5) is True
    rw.read_lock().release()


def test_a_plain_lock_of_the_name_excludes_readers(client, name):
    lock = client.lock(name)
    rw = client.rwlock(name)
    with lock:
        assert rw.read_lock().acquire(blocking=False) is False
        assert rw.write_lock().acquire(blocking=False) is False
    with rw.read_lock():
        assert lock.acquire(blocking=False) is False
    with rw.write_lock():
        assert lock.acquire(blocking=False) is False
    assert lock.acquire(blocking=False) is True
    lock.release()


def test_a_waiting_writer_gets_the_lock_when_readers_leave(client, name):
    rw = client.rwlock(name)
    writer = client.rwlock(name).write_lock()
    assert rw.read_lock().acquire()
    got = threading.Event()

    def write() -> None:
        with writer:
            got.set()

    t = threading.Thread(target=write)
    t.start()
    time.sleep(0.3)
    assert not got.is_set()
    # Writer preference: new readers queue behind the waiting writer.
    assert client.rwlock(name).read_lock().acquire(blocking=False) is False
    rw.read_lock().release()
    assert got.wait(timeout=5)
    t.join()


def test_one_thread_may_hold_several_reads_but_one_write(client, name, r):
    rw = client.rwlock(name)
    read = rw.read_lock()
    assert read.acquire() and read.acquire()
    assert r("ZCARD", readers_key(name)) == 2
    read.release()
    assert read.owned()
    read.release()
    assert not read.owned()
    with pytest.raises(redmutex.NotHeldError, match="release unlocked lock"):
        read.release()
    write = rw.write_lock()
    assert write.acquire()
    # Not re-entrant, as Lock.
    assert write.acquire(blocking=False) is False
    write.release()
    with pytest.raises(RuntimeError):
        write.release()


def test_fences(client, name):
    rw = client.rwlock(name)
    with rw.write_lock() as w:
        first = w.fence
    with rw.read_lock() as rd:
        # A read carries the fence of the last write it may observe.
        assert rd.fence == first
    with rw.write_lock() as w:
        assert w.fence > first
    with client.lock(name) as lock:
        assert lock.fence > first + 1


def test_extend_valid_for_check(client, name):
    rw = client.rwlock(name, ttl=2.0)
    for side in (rw.read_lock(), rw.write_lock()):
        with pytest.raises(redmutex.NotHeldError):
            side.extend(5)
        with pytest.raises(redmutex.NotHeldError):
            side.check()
        with side:
            side.check()
            assert 0 < side.valid_for <= 2.0
            side.extend(60)
            assert side.valid_for > 50
        assert side.valid_for == 0.0


def test_on_lost_of_a_read_and_a_write(client, name, r):
    lost = threading.Event()
    rw = client.rwlock(name, ttl=0.3, on_lost=lost.set)
    read = rw.read_lock()
    assert read.acquire()
    r("DEL", readers_key(name))
    assert lost.wait(timeout=5)
    assert read.wait_lost(timeout=5) is True
    with pytest.raises(redmutex.LockLostError):
        read.check()
    with pytest.raises(redmutex.LockLostError):
        read.release()

    lost.clear()
    write = rw.write_lock()
    assert write.acquire()
    r("SET", name, "intruder")
    assert lost.wait(timeout=5)
    assert not write.owned()
    with pytest.raises(redmutex.LockLostError):
        _ = write.fence
    with pytest.raises(redmutex.LockLostError):
        write.release()
    r("DEL", name)


def test_status_shows_the_writer_and_the_readers(client, name):
    rw = client.rwlock(name)
    free = rw.status()
    assert isinstance(free, redmutex.RwLockStatus)
    assert free.writer.holder is None and free.readers == []
    with rw.read_lock():
        s = rw.status()
        assert len(s.readers) == 1 and s.writer.holder is None
        assert repr(s).startswith("RwLockStatus(writer=LockStatus(holder=None")
    with rw.write_lock():
        s = rw.status()
        assert s.writer.holder is not None and s.readers == []


def test_bad_input_raises_clear_errors(client):
    with pytest.raises(ValueError, match="1 to 512 bytes"):
        client.rwlock(b"x" * 513)
    with pytest.raises(TypeError, match="str or bytes"):
        client.rwlock(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        client.rwlock("n", ttl=-1)
    with pytest.raises(ValueError, match="ttl"):
        client.rwlock("n", ttl=0)
    rw = client.rwlock("n")
    with pytest.raises(ValueError, match="non-blocking"):
        rw.read_lock().acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError):
        rw.write_lock().acquire(timeout=-5)
    assert not rw.read_lock().owned() and not rw.write_lock().owned()


@pytest.mark.parametrize("side", ["read", "write"])
def test_sigint_interrupts_a_waiting_side(client, name, side):
    lock = client.lock(name)
    rw = client.rwlock(name)
    waiting = rw.read_lock() if side == "read" else rw.write_lock()
    assert lock.acquire()
    latency = interrupted_within(waiting.acquire, 0.2)
    assert latency < 0.1, f"KeyboardInterrupt {latency * 1000:.0f} ms after SIGINT"
    assert not waiting.owned()
    lock.release()
    with waiting:
        assert waiting.owned()
