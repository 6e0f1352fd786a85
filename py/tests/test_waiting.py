"""Waiting at scale: many Python threads of one client waiting on one lock cost Redis what
one waiting thread costs, and each of them still gets the lock once, in turn."""

from __future__ import annotations

import threading
import time

import redmutex
from conftest import RedisServer


def _stats(side) -> tuple[int, int]:
    info = side("INFO", "stats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(fields["total_commands_processed"]), int(fields["total_connections_received"])


def _over(side, seconds: float) -> tuple[int, int]:
    """Commands and new connections over `seconds`, less the second INFO's own."""
    c0, n0 = _stats(side)
    time.sleep(seconds)
    c1, n1 = _stats(side)
    return c1 - c0 - 1, n1 - n0


def test_a_hundred_waiting_threads_cost_what_one_costs(redis_server: RedisServer, name: str):
    holder = redmutex.Client(redis_server.url).lock(name)
    assert holder.acquire(blocking=False)
    client = redmutex.Client(redis_server.url)
    inside = threading.Lock()
    taken: list[int] = []
    errors: list[BaseException] = []
    started = threading.Semaphore(0)

    def wait(i: int) -> None:
        try:
            started.release()
            lock = client.lock(name)
            assert lock.acquire(timeout=60)
            assert inside.acquire(blocking=False), "two holders at once"
            taken.append(i)
            inside.release()
            lock.release()
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    side = redis_server.resp()
    try:
        threads = [threading.Thread(target=wait, args=(0,))]
        threads[0].start()
        started.acquire()
        time.sleep(0.5)
        one, _ = _over(side, 1.0)
        n = 100
        more = [threading.Thread(target=wait, args=(i,)) for i in range(1, n)]
        for t in more:
            t.start()
        for _ in more:
            started.acquire()
        threads += more
        time.sleep(1.0)
        many, connections = _over(side, 1.0)
    finally:
        side.close()
    print(f"1 waiter: {one} commands/s; {n} waiters: {many} commands/s, {connections} new")
    assert many <= 3 * one + 20, f"{n} waiting threads: {many} commands in a second, one: {one}"
    assert connections == 0, f"{connections} connections opened while {n} threads wait"
    holder.release()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a waiter never got the lock"
    assert not errors, errors
    assert sorted(taken) == list(range(n))


def test_a_long_wait_costs_redis_a_handful_of_commands_a_second(
    redis_server: RedisServer, name: str
):
    """A wait on the main thread (Ctrl-C can end it) behind a lock held for long: its waits
    grow from 250 ms to the core's 2 s cap while nothing is released, so it costs Redis a
    round every 2 s, and it still takes the lock when the holder releases."""
    holder = redmutex.Client(redis_server.url).lock(name)
    assert holder.acquire(blocking=False)
    measured: list[int] = []

    def measure_then_release() -> None:
        side = redis_server.resp()
        try:
            time.sleep(1.75)  # 250 + 500 + 1000 ms of waits
            commands, _ = _over(side, 4.0)
            measured.append(commands)
        finally:
            side.close()
            holder.release()

    t = threading.Thread(target=measure_then_release)
    t.start()
    lock = redmutex.Client(redis_server.url).lock(name)
    try:
        assert lock.acquire(timeout=30)
    finally:
        t.join(timeout=30)
    lock.release()
    assert measured, "the measurement did not finish"
    print(f"a long wait: {measured[0] / 4.0:.1f} commands/s")
    assert measured[0] <= 24, f"{measured[0]} commands in 4 s"
