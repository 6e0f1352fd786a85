"""Client.stats(): each figure moves when what it counts happens through the Python API (a
grant, a refusal, a wait that runs out, a release, a loss, a thread waiting, a hand-off, a
renewal, a connection), with its type."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import redmutex
from conftest import start_redis, stop


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


REASONS = ("another_owner", "gone", "nodes_down", "validity_ran_out", "max_hold")


def _lost_by(**counts: int) -> dict[str, int]:
    """Every reason, 0 unless given."""
    return {reason: counts.get(reason, 0) for reason in REASONS}


def _lost_saying(lock: redmutex.Lock, why: str) -> None:
    """Waits (bounded) until `lock` is lost, and checks the reason it gives."""
    assert lock.wait_lost(timeout=10.0)
    with pytest.raises(redmutex.LockLostError, match=why):
        lock.check()


def test_each_loss_is_counted_by_its_reason(redis_server, name, r):
    """One loss for each reason that one server can show, on one client, each counted under
    its own reason as it happens, the reasons adding up to lost: another owner's value put in
    the key (the next renewal is refused with it), the key deleted (gone at the next
    renewal), a lease nothing renews (its validity runs out), and a max_hold longer than the
    ttl (the lease is renewed, then renewal stops at max_hold). Nodes down needs nodes of its
    own: see the next test."""
    client = redmutex.Client(redis_server.url)

    def counted(**counts: int) -> redmutex.ClientStats:
        # wait_lost returns once the lock is no longer held; the renew thread may count a
        # lease that ran out a moment later.
        want = _lost_by(**counts)
        assert _until(lambda: client.stats().lost_by == want), client.stats().lost_by
        s = client.stats()
        assert s.lost == sum(s.lost_by.values())
        return s

    other = client.lock(name + ":other", ttl=0.5)
    assert other.acquire()
    r("SET", name + ":other", "someone-else")
    _lost_saying(other, "another owner")
    counted(another_owner=1)

    gone = client.lock(name + ":gone", ttl=0.5)
    assert gone.acquire()
    r("DEL", name + ":gone")
    _lost_saying(gone, "gone")
    counted(another_owner=1, gone=1)

    ran_out = client.lock(name + ":ran-out", ttl=0.2, auto_renew=False)
    assert ran_out.acquire()
    _lost_saying(ran_out, "auto-renew is off")
    renewals = counted(another_owner=1, gone=1, validity_ran_out=1).renewals

    held = client.lock(name + ":max-hold", ttl=0.5, max_hold=0.8)
    assert held.acquire()
    _lost_saying(held, "max_hold")
    s = counted(another_owner=1, gone=1, validity_ran_out=1, max_hold=1)
    assert s.renewals > renewals, "renewed until max_hold"
    assert (s.lost, s.acquired, s.held_now) == (4, 4, 0)


def test_a_loss_to_nodes_down_is_counted_as_such(tmp_path, dead_url, name):
    """Three nodes: one where nothing listens (it refuses connections), and two servers of
    this test's own, which grant a 1 s lease. Right after a renewal one server is killed
    (from then on it refuses connections too) and the other frozen (SIGSTOP). The next
    renewal round waits for the frozen node as long as the node timeout, here the ttl, so it
    ends after the validity did, with two of the three nodes refusing connections: lost,
    nodes_down. (Were the third node not frozen, the rounds would end at once and the
    validity run out between two of them: validity_ran_out, as with one dead node.) The loss
    is awaited on the figures, as a watchdog's wait_lost might itself end a lease whose
    validity it sees run out."""
    killed, frozen = start_redis(str(tmp_path)), start_redis(str(tmp_path))
    try:
        client = redmutex.Client([dead_url, killed.url, frozen.url], node_timeout=1.0)
        lock = client.lock(name, ttl=1.0)
        assert lock.acquire(timeout=5)
        # A renewal just ended: the next one is about 330 ms away.
        assert _until(lambda: client.stats().renewals >= 1, timeout=10.0), client.stats()
        killed.process.kill()
        killed.process.wait(timeout=5)
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            assert _until(lambda: client.stats().lost >= 1, timeout=10.0), client.stats()
        finally:
            frozen.process.send_signal(signal.SIGCONT)
        assert lock.wait_lost(timeout=0)
        with pytest.raises(redmutex.LockLostError, match="nodes are down"):
            lock.check()
        s = client.stats()
        assert s.lost_by == _lost_by(nodes_down=1)
        assert s.lost == sum(s.lost_by.values()) == 1
        assert s.renewal_failures >= 1 and s.held_now == 0
    finally:
        stop(killed.process)
        stop(frozen.process)


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


def test_each_kind_is_counted_apart_and_adds_up(redis_server, name):
    """A mutex granted and refused, a read hold granted (a write hold refused: a writer is a
    mutex), a semaphore permit granted and its wait run out."""
    client = redmutex.Client(redis_server.url)
    s = client.stats()
    assert set(s.by_kind) == {"mutex", "semaphore", "read"}
    assert all(isinstance(o, redmutex.Outcomes) for o in s.by_kind.values())
    assert all(o.acquired == 0 for o in s.by_kind.values())

    lock = client.lock(name + ":m", ttl=30.0)
    assert lock.acquire(blocking=False)
    assert not client.lock(name + ":m").acquire(blocking=False)
    rw = client.rwlock(name + ":rw", ttl=30.0)
    read = rw.read_lock()
    assert read.acquire(blocking=False)
    assert not rw.write_lock().acquire(blocking=False)
    sem = client.semaphore(name + ":s", 1, ttl=30.0)
    assert sem.acquire(blocking=False)
    assert not client.semaphore(name + ":s", 1).acquire(timeout=0.05)

    s = client.stats()
    m, sm, rd = s.by_kind["mutex"], s.by_kind["semaphore"], s.by_kind["read"]
    assert (m.acquired, m.refused, m.timed_out, m.interrupted, m.failed) == (1, 2, 0, 0, 0)
    assert (rd.acquired, rd.refused, rd.timed_out) == (1, 0, 0)
    assert (sm.acquired, sm.refused, sm.timed_out) == (1, 0, 1)
    for field in ("acquired", "refused", "timed_out", "interrupted", "failed"):
        assert sum(getattr(o, field) for o in s.by_kind.values()) == getattr(s, field), field
    lock.release()
    read.release()
    sem.release()


def test_a_grant_at_the_release_is_a_handoff(redis_server, name):
    """A thread that waited for a held lock and got it at the release received a hand-off;
    the holder, granted at once, did not."""
    holder_client = redmutex.Client(redis_server.url)
    holder = holder_client.lock(name, ttl=30.0)
    assert holder.acquire()
    client = redmutex.Client(redis_server.url)
    got: list[bool] = []

    def wait() -> None:
        lock = client.lock(name)
        got.append(lock.acquire(timeout=30))
        lock.release()

    def announced() -> bool:
        # Refused once, the waiter says in Redis that it waits: waiting_now alone counts a
        # call from its start, before its first attempt.
        return any(lock.waiters >= 1 for lock in holder_client.list(name))

    t = threading.Thread(target=wait)
    t.start()
    try:
        assert _until(announced, timeout=10.0), client.stats()
    finally:
        holder.release()
        t.join(timeout=30)
    assert got == [True]
    assert client.stats().handoffs == 1
    assert holder_client.stats().handoffs == 0


def test_renewals_are_measured_for_lag(redis_server, name):
    """A 1 s lease is renewed about every 330 ms; each renewal sent is measured against its
    schedule."""
    client = redmutex.Client(redis_server.url)
    lag = client.stats().renewal_lag_seconds
    assert isinstance(lag, redmutex.Histogram)
    assert lag.count == 0 and len(lag.buckets) == 18 and lag.bounds[-1] == 60.0
    lock = client.lock(name, ttl=1.0)
    assert lock.acquire()
    try:
        assert _until(lambda: client.stats().renewals >= 2), client.stats()
    finally:
        lock.release()
    s = client.stats()
    lag = s.renewal_lag_seconds
    assert lag.count > 0 and lag.count == s.renewals + s.renewal_failures
    assert sum(lag.buckets) == lag.count and lag.sum >= 0


def test_open_connections_are_counted_per_node(redis_server, dead_url, name):
    """None before the first call; then at least one to the live node, none to the dead
    one, in the order of the nodes."""
    client = redmutex.Client(redis_server.url)
    assert client.stats().connections == [0]
    assert not client.lock(name).locked()
    conns = client.stats().connections
    assert isinstance(conns, list) and len(conns) == 1 and conns[0] >= 1

    two = redmutex.Client([dead_url, redis_server.url], connect_timeout=0.1)
    assert two.stats().connections == [0, 0]
    try:
        two.lock(name).locked()
    except redmutex.LockError:
        pass
    dead, live = two.stats().connections
    assert (dead, live >= 1) == (0, True)


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
