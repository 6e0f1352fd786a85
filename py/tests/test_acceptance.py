"""What the Python package promises its users, against a real redis-server."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest

import redmutex
from sigint import interrupted_within
from workers import counter_worker

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_processes_never_overlap(redis_server, name, r):
    """1. 8 processes x 50 read-modify-write sections on a Redis counter: exact count,
    fences strictly increasing, and some acquisitions had to wait."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(8) as pool:
        jobs = [
            pool.apply_async(counter_worker, (redis_server.url, redis_server.port, name, 50))
            for _ in range(8)
        ]
        results = [job.get(timeout=120) for job in jobs]
    assert int(r("GET", name + ":counter")) == 400
    assert [p for _, problems in results for p in problems] == []
    assert sum(waits for waits, _ in results) >= 1
    assert r("EXISTS", name) == 0


def test_gil_is_released_while_acquire_blocks(client, name):
    """2. While one thread blocks in acquire(), another Python thread keeps running."""
    holder = client.lock(name)
    assert holder.acquire()
    waiter = client.lock(name)
    results = []
    t = threading.Thread(target=lambda: results.append(waiter.acquire(timeout=1.5)))
    t.start()
    try:
        time.sleep(0.1)
        spins = 0
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            spins += 1
        assert t.is_alive(), "acquire returned while the lock was held"
        assert spins > 10_000
    finally:
        t.join(timeout=10)
        holder.release()
    assert results == [False]


class Boom(Exception):
    pass


def test_with_releases_and_reraises(client, name, r):
    """3. `with lock:` around a raised exception releases the lock and re-raises."""
    lock = client.lock(name)
    with pytest.raises(Boom):
        with lock:
            assert lock.owned()
            assert r("EXISTS", name) == 1
            raise Boom()
    assert not lock.owned()
    assert r("EXISTS", name) == 0
    assert not lock.locked()


@pytest.mark.parametrize("delay", [0.13, 0.2, 0.27])
def test_sigint_interrupts_a_blocking_acquire(client, name, r, delay):
    """4. SIGINT during a blocking acquire raises KeyboardInterrupt within 100 ms, and the
    waiter holds nothing afterwards."""
    holder = client.lock(name)
    assert holder.acquire()
    waiter = client.lock(name)
    latency = interrupted_within(lambda: waiter.acquire(timeout=10), delay)
    assert latency < 0.1
    assert not waiter.owned()
    holder.release()
    # The interrupted waiter took nothing later either.
    time.sleep(0.1)
    assert r("EXISTS", name) == 0


def _wait_child(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child did not exit")


def test_forked_child_leaves_the_parents_lock_alone(client, name, r):
    """5. A forked child exits while the parent holds the lock: the parent's lock keeps its
    value and is still renewed. The child's copy neither releases nor renews, and the Client
    works in the child on connections of its own."""
    lock = client.lock(name, ttl=0.6)
    assert lock.acquire()
    value = r("GET", name)
    with warnings.catch_warnings():
        # Python 3.12+ warns about forking a process with threads (ours: the renew thread).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report through the exit status only, never return
        code = 1
        try:
            failures = 0
            if lock.owned():
                failures += 1
            try:
                lock.release()
                failures += 1
            except redmutex.NotHeldError:
                pass
            other = client.lock(name + ":child", ttl=1.0)
            if not other.acquire(timeout=2):
                failures += 1
            other.release()
            del lock
            gc.collect()
            time.sleep(0.3)
            code = min(failures, 1)
        finally:
            os._exit(code)
    assert _wait_child(pid, 10) == 0
    assert r("GET", name) == value
    time.sleep(1.0)  # beyond the TTL: only the parent's renewal keeps it
    assert r("GET", name) == value
    assert r("PTTL", name) > 0
    assert lock.owned()
    lock.release()
    assert r("EXISTS", name) == 0


def test_loss_is_reported(client, name, r):
    """6. Overwriting the key: on_lost is called, check() says why, release() raises
    LockLostError, and the other value stays."""
    lost = threading.Event()
    lock = client.lock(name, ttl=0.6, on_lost=lost.set)
    assert lock.acquire()
    r("SET", name, "intruder")
    assert lost.wait(timeout=5)
    assert not lock.owned()
    with pytest.raises(redmutex.LockLostError) as why:
        lock.check()
    assert str(why.value) == (
        "lost: another owner has it (a renewal was refused) "
        f"[{client.nodes[0]}: held by another owner]"
    )
    with pytest.raises(redmutex.LockLostError):
        lock.fence
    with pytest.raises(redmutex.LockLostError):
        lock.release()
    assert r("GET", name) == b"intruder"


def test_nightly_invoice_example_runs(redis_server):
    """7. The example: three workers, exactly one sends the invoices."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples/python/nightly_invoice.py"), redis_server.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # The example exits 0 only when exactly one worker process sent the invoices and the two
    # others skipped (it checks their exit codes). The workers' own lines are not counted:
    # three processes share one pipe, and a line from a worker may not reach it.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 of 3 workers sent the invoices" in proc.stdout, proc.stdout


def test_a_key_that_vanished_while_held_is_a_loss_at_release(client, name, r):
    """A key deleted behind the holder's back (an operator's DEL, an eviction, FLUSHALL):
    release() raises LockLostError naming the node, never returns as if it released."""
    lock = client.lock(name, ttl=30.0)
    assert lock.acquire()
    r("DEL", name)
    with pytest.raises(redmutex.LockLostError) as why:
        lock.release()
    assert str(why.value).endswith(f"[{client.nodes[0]}: not there]")

