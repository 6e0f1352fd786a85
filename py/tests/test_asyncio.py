"""redmutex.asyncio against a real redis-server: tasks of one loop serialise on one lock,
each hand-off woken by the release, waiting costs Redis what a waiting thread costs; tasks of
several processes never overlap; cancellation at any point (task.cancel(), asyncio.timeout)
leaves nothing held and no announcement behind; a loss calls on_lost; the loop keeps its pace
while tasks wait and hand the lock on; Ctrl-C on asyncio.run ends the program with nothing
held."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import typing

import pytest

import redmutex
import redmutex.asyncio as aio
from conftest import RedisServer
from resp import Resp
from test_waiting import _over
from workers import async_counter_worker


def _keys(r: Resp, name: str) -> list[bytes]:
    """Every key of `name`'s lock but its fence counter (which never expires)."""
    keys = r("KEYS", "*" + name + "*") or []
    return sorted(k for k in keys if not k.endswith(b":fence"))


def _announcements(name: str) -> str:
    """The key of the waiters' announcements on `name`'s lock."""
    return "{" + name + "}:waitq"


def _withdrawn_before_lapsing(r: Resp, name: str) -> None:
    """Asserts that the announcements on `name`'s lock are gone, or go well before the
    latest of them would have lapsed by itself: taken back, not left to expire."""
    key = _announcements(name)
    left = r("PTTL", key)
    if left == -2:
        return
    deadline = time.monotonic() + min(10.0, left / 1000 / 2)
    while r("EXISTS", key) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert r("EXISTS", key) == 0, f"an announcement stayed (it lapses in {left} ms)"


def test_a_hundred_tasks_take_turns_each_woken_by_the_release(
    redis_server: RedisServer, name: str
) -> None:
    holder = redmutex.Client(redis_server.url).lock(name)
    assert holder.acquire(blocking=False)
    client = aio.Client(redis_server.url)
    inside: list[int] = []
    order: list[int] = []
    side = redis_server.resp()

    async def task(i: int) -> None:
        async with client.lock(name):
            assert not inside, f"{i} entered while {inside} held it"
            inside.append(i)
            await asyncio.sleep(0.001)
            order.append(i)
            inside.remove(i)

    async def main() -> tuple[int, int, float]:
        tasks = [asyncio.create_task(task(i)) for i in range(100)]
        await asyncio.sleep(1.0)
        # While they wait: what one waiting thread costs, not a hundred (see test_waiting).
        commands, connections = await asyncio.to_thread(_over, side, 1.0)
        released = time.monotonic()
        holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        return commands, connections, (time.monotonic() - released) / 100

    try:
        commands, connections, per_handoff = asyncio.run(main())
    finally:
        side.close()
    print(f"100 waiting tasks: {commands} commands/s; {per_handoff * 1e3:.2f} ms a hand-off")
    assert commands <= 60, f"100 waiting tasks cost {commands} commands in a second"
    assert connections == 0
    assert sorted(order) == list(range(100))
    # Woken by each release, not by a wait running out: 100 hand-offs in far less than one
    # 250 ms wait each.
    assert per_handoff < 0.1, f"{per_handoff * 1e3:.0f} ms a hand-off"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_tasks_of_five_processes_never_overlap(
    redis_server: RedisServer, name: str, loop: str
) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    # 50 tasks: 10 on each of 5 processes, each task making `rounds` critical sections.
    processes, tasks, rounds = 5, 10, 10
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        results = [
            pool.apply_async(
                async_counter_worker,
                (redis_server.url, redis_server.port, name, rounds, tasks, loop),
            )
            for _ in range(processes)
        ]
        outcomes = [r.get(timeout=120) for r in results]
    problems = [p for _, ps in outcomes for p in ps]
    assert not problems, problems
    r = redis_server.resp()
    try:
        assert int(r("GET", name + ":counter")) == processes * tasks * rounds
    finally:
        r.close()
    assert sum(waits for waits, _ in outcomes) > 0, "no acquisition ever had to wait"


def test_cancelling_a_thousand_acquires_at_random_points_leaves_nothing(
    redis_server: RedisServer, name: str, r: Resp
) -> None:
    client = aio.Client(redis_server.url)
    rng = random.Random(7)
    # Leases far longer than the test and the wait for its clean-ups: a hold left behind
    # cannot expire before it is looked for.
    ttl = 120.0

    async def one(i: int) -> None:
        lock = client.lock(name, ttl=ttl)
        task = asyncio.create_task(lock.acquire(timeout=30))
        await asyncio.sleep(rng.random() * 0.004)
        if task.cancel():
            try:
                await task
            except asyncio.CancelledError:
                pass
            assert not lock.owned(), f"{i}: cancelled, yet the object holds the lock"
        elif task.result():
            await lock.release()

    async def main() -> None:
        holder = client.lock(name, ttl=ttl)
        for i in range(1000):
            # Every tenth round behind a holder, so that some acquires wait when cancelled.
            if i % 10 == 0:
                # Bounded: a hold left behind by an earlier round would keep it forever.
                assert await holder.acquire(timeout=10), f"{i}: the lock is still held"
                release = lambda: asyncio.ensure_future(holder.release())  # noqa: E731
                asyncio.get_running_loop().call_later(0.002, release)
            await one(i)
            if i % 10 == 0:
                # An announcement lapses by itself a few seconds after it was made, long
                # before the end: each must be taken back, not left to lapse.
                await asyncio.to_thread(_withdrawn_before_lapsing, r, name)
        await asyncio.sleep(0.1)

    asyncio.run(main())
    # The discards and releases still running on the pool, and the withdrawals left to the
    # background, end within 10 s; a hold left behind would last 120 s. A release's wake-up
    # signal lives as long as the announcements it was for, and says nothing is held.
    deadline = time.monotonic() + 10
    left = [b""]
    while left and time.monotonic() < deadline:
        left = [k for k in _keys(r, name) if not k.endswith(b":wake")]
        time.sleep(0.05)
    assert r("EXISTS", name) == 0, "a cancelled acquire left the lock held"
    assert left == [], f"a cancelled acquire left {left} behind"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is Python 3.11+")
def test_an_acquire_ended_by_asyncio_timeout_leaves_nothing_and_the_next_gets_it_at_once(
    redis_server: RedisServer, name: str, r: Resp
) -> None:
    client = aio.Client(redis_server.url)
    rng = random.Random(11)

    async def timed_out(lock: aio.Lock, seconds: float) -> bool:
        """acquire() under asyncio.timeout(seconds): True when it got the lock."""
        try:
            async with asyncio.timeout(seconds):
                return await lock.acquire()
        except TimeoutError:
            assert not lock.owned(), "timed out, yet the object holds the lock"
            return False

    async def main() -> None:
        # A waiter that has announced itself, ended by asyncio.timeout.
        holder = client.lock(name, ttl=120.0)
        assert await holder.acquire(blocking=False)
        waiter = client.lock(name, ttl=120.0)
        task = asyncio.create_task(timed_out(waiter, 0.5))
        deadline = time.monotonic() + 10
        while not r("EXISTS", _announcements(name)) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert r("EXISTS", _announcements(name)), "the waiter never announced itself"
        assert not await task
        assert holder.owned() and r("EXISTS", name) == 1
        _withdrawn_before_lapsing(r, name)
        # No announcement left: the release frees the lock outright (no hand-off kept for a
        # waiter), and a newcomer's single attempt gets it.
        await holder.release()
        nxt = client.lock(name, ttl=120.0)
        assert await nxt.acquire(blocking=False), "the next acquirer did not get it at once"
        await nxt.release()

        # The release lands about when the timeout fires: the grant, if it comes with the
        # cancellation, is released; whoever took it, the lock ends free.
        for _ in range(20):
            assert await holder.acquire(blocking=False)
            loop = asyncio.get_running_loop()
            loop.call_later(0.05 + rng.random() * 0.01,
                            lambda: asyncio.ensure_future(holder.release()))
            got = await timed_out(waiter, 0.055)
            if got:
                await waiter.release()
            deadline = time.monotonic() + 10
            while (holder.owned() or r("EXISTS", name)) and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            assert r("EXISTS", name) == 0, "the lock is still held after the timed-out wait"
            _withdrawn_before_lapsing(r, name)
            assert await nxt.acquire(blocking=False), "the next acquirer did not get it at once"
            await nxt.release()

    asyncio.run(main())


def test_a_task_cancelled_inside_async_with_releases(
    redis_server: RedisServer, name: str, r: Resp
) -> None:
    client = aio.Client(redis_server.url)

    async def hold() -> None:
        async with client.lock(name):
            await asyncio.sleep(60)

    async def main() -> None:
        task = asyncio.create_task(hold())
        while r("EXISTS", name) != 1:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert r("EXISTS", name) == 0, "the cancelled task's lock is still held"


def test_the_loop_keeps_its_pace_while_a_hundred_tasks_wait_and_hand_the_lock_on(
    redis_server: RedisServer, name: str
) -> None:
    client = aio.Client(redis_server.url)
    holder = aio.Client(redis_server.url).lock(name)

    async def ticker(ticks: int, until: typing.Callable[[], bool] = lambda: False) -> float:
        """The worst lateness of a 10 ms ticker over `ticks` ticks, or until `until()`."""
        loop = asyncio.get_running_loop()
        worst = 0.0
        next_tick = loop.time() + 0.01
        for _ in range(ticks):
            await asyncio.sleep(max(0.0, next_tick - loop.time()))
            worst = max(worst, loop.time() - next_tick)
            next_tick += 0.01
            if until():
                break
        return worst

    inside: list[int] = []
    order: list[int] = []

    async def take_turn(i: int) -> None:
        lock = client.lock(name)
        assert await lock.acquire(timeout=60), f"{i} never got the lock"
        try:
            assert not inside, f"{i} got the lock while {inside} held it"
            inside.append(i)
            await asyncio.sleep(0.005)  # holds it briefly
            inside.remove(i)
            order.append(i)
        finally:
            await lock.release()  # hands it on to the next waiter

    async def main() -> tuple[float, float, float, float, float]:
        # The machine's own lateness: the same ticker with nothing else on the loop, before
        # and after, for twice as long as the longest phase below.
        alone = await ticker(200)  # 2 s
        assert await holder.acquire(blocking=False)
        tasks = [asyncio.create_task(take_turn(i)) for i in range(100)]
        # Starting a hundred waits: the loop only queues their calls (no thread starts on it).
        starting = await ticker(1000, lambda: client.stats().waiting_now == 100)
        assert client.stats().waiting_now == 100, "the hundred tasks are not all waiting"
        # A hundred tasks waiting: the loop runs nothing of theirs.
        waiting = await ticker(200)  # 2 s
        # The holder lets go, and the hundred take the lock in turn, each handing it on.
        handing_off = asyncio.create_task(ticker(6000, lambda: all(t.done() for t in tasks)))
        released = time.monotonic()
        await holder.release()
        handing = await handing_off
        took = time.monotonic() - released
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
        alone = max(alone, await ticker(200))
        return alone, starting, waiting, handing, took

    alone, starting, waiting, handing, took = asyncio.run(main())
    print(f"worst lateness of a 10 ms ticker: {alone * 1e3:.2f} ms alone, "
          f"{starting * 1e3:.2f} ms while 100 waits start, {waiting * 1e3:.2f} ms while they "
          f"wait, {handing * 1e3:.2f} ms while they hand the lock on ({took:.2f} s for 100 turns)")
    assert sorted(order) == list(range(100))
    # 5 ms; on a machine busy enough that the ticker alone is late by more than 4 ms, what
    # it was alone and 1 ms (the machine's lateness is not the loop's: a shared, busy
    # machine's ticker alone was up to 6 ms late here).
    bound = max(0.005, alone + 0.001)
    assert waiting <= bound, (
        f"the ticker ran {waiting * 1e3:.1f} ms late while 100 tasks waited "
        f"({alone * 1e3:.1f} ms alone)"
    )
    assert handing <= bound, (
        f"the ticker ran {handing * 1e3:.1f} ms late while 100 tasks handed the lock on "
        f"({alone * 1e3:.1f} ms alone)"
    )
    # As a hundred waits start, a hundred of the pool's threads each take the GIL to pick up
    # a call and enter the core, and the loop's thread competes with them for it: with 128
    # threads started before the tasks, the start-up was no less late (over 5 ms in 6 of 14
    # runs, as with threads started on demand), so starting the pool early does not keep the
    # start-up within 5 ms. Starting a thread on the loop's thread held it 35-50 ms.
    assert starting < 0.025, f"the ticker ran {starting * 1e3:.1f} ms late as 100 waits started"


def test_the_pool_runs_every_call_beyond_its_size_and_after_a_fork() -> None:
    from redmutex._pool import Pool

    pool = Pool(2, "test-pool")
    gate = threading.Event()
    lock = threading.Lock()
    inside = [0, 0]  # now, most at once

    def call(i: int) -> int:
        with lock:
            inside[0] += 1
            inside[1] = max(inside)
        assert gate.wait(10), "the gate never opened"
        with lock:
            inside[0] -= 1
        return i

    futures = [pool.submit(call, i) for i in range(6)]
    # A call runs even when its awaiting task gave up: its future cannot be cancelled.
    assert not futures[5].cancel()
    deadline = time.monotonic() + 10
    while inside[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert inside[0] == 2, "the pool of 2 does not run 2 calls at once"
    gate.set()
    assert [f.result(timeout=10) for f in futures] == list(range(6))
    assert inside[1] == 2, f"{inside[1]} calls ran at once in a pool of 2"

    # A child of fork() has none of the parent's threads: its calls still run.
    gate.clear()
    busy = pool.submit(call, 6)
    pid = os.fork()
    if pid == 0:
        try:
            code = 0 if pool.submit(lambda: 42).result(timeout=10) == 42 else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    gate.set()
    assert busy.result(timeout=10) == 6
    assert os.waitstatus_to_exitcode(status) == 0, "a call in the forked child did not run"


def test_every_kind_and_call(redis_server: RedisServer, name: str) -> None:
    client = aio.Client(redis_server.url)

    async def main() -> None:
        lock = client.lock(name, ttl=2.0)
        assert not await lock.locked()
        async with lock:
            assert lock.owned() and lock.fence > 0 and lock.valid_for > 0
            lock.check()
            await lock.extend(5.0)
            assert await lock.locked()
            assert (await lock.status()).holder is not None
            assert not await client.lock(name).acquire(blocking=False)
            assert not await lock.wait_lost(0.05)
        assert not lock.owned()
        with pytest.raises(redmutex.NotHeldError):
            await lock.release()
        with pytest.raises(ValueError):
            await lock.acquire(blocking=False, timeout=1)

        sem = client.semaphore(name + ":sem", 2)
        assert not await sem.locked()
        assert await sem.acquire()
        assert not await sem.locked(), "one permit of two is free"
        assert await sem.acquire()
        assert await sem.locked()
        assert not await client.semaphore(name + ":sem", 2).acquire(timeout=0.05)
        assert len((await sem.status()).holders) == 2
        await sem.release(2)

        rw = client.rwlock(name + ":rw")
        readers = [rw.read_lock() for _ in range(3)]
        for reader in readers:
            assert await reader.acquire()
        writer = rw.write_lock()
        assert not await writer.acquire(timeout=0.05)
        assert len((await rw.status()).readers) == 3
        # Each side reports the read-write lock's status, as the blocking RwLock.status().
        seen = await readers[0].status()
        assert len(seen.readers) == 3 and seen.writer.holder is None
        assert len((await writer.status()).readers) == 3
        for reader in readers:
            await reader.release()
        async with writer:
            assert writer.owned()
            seen = await rw.read_lock().status()
            assert seen.writer.holder is not None and seen.readers == []
            assert (await writer.status()).writer.fence == writer.fence

        held = client.lock(name, ttl=1.0)
        assert await held.acquire()
        other = redis_server.resp()
        try:
            other("SET", name, "someone-else")
        finally:
            other.close()
        assert await held.wait_lost(10)
        with pytest.raises(redmutex.LockLostError):
            held.check()
        with pytest.raises(redmutex.LockLostError):
            await held.release()

    asyncio.run(main())


def test_on_lost_is_called_when_the_lock_is_taken_or_deleted_behind_the_holder(
    redis_server: RedisServer, name: str, r: Resp
) -> None:
    client = aio.Client(redis_server.url)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        lost: dict[str, asyncio.Event] = {"taken": asyncio.Event(), "deleted": asyncio.Event(),
                                           "released": asyncio.Event()}
        threads: list[int] = []

        def on_lost(which: str) -> typing.Callable[[], None]:
            def called() -> None:
                threads.append(threading.get_ident())
                loop.call_soon_threadsafe(lost[which].set)
            return called

        # ttl 1 s: renewed every third of a second, so the renewal finds the loss soon.
        taken = client.lock(name + ":taken", ttl=1.0, on_lost=on_lost("taken"))
        deleted = client.lock(name + ":deleted", ttl=1.0, on_lost=on_lost("deleted"))
        released = client.lock(name + ":released", ttl=1.0, on_lost=on_lost("released"))
        for lock in (taken, deleted, released):
            assert await lock.acquire(timeout=10)
        r("SET", name + ":taken", "another-owner")
        r("DEL", name + ":deleted")
        await released.release()
        await asyncio.wait_for(lost["taken"].wait(), timeout=10)
        await asyncio.wait_for(lost["deleted"].wait(), timeout=10)
        for lock in (taken, deleted):
            assert not lock.owned()
            with pytest.raises(redmutex.LockLostError):
                lock.check()
            assert await lock.wait_lost(0)
        assert loop_thread not in threads, "on_lost ran on the loop's thread"
        # A released acquisition is never reported lost: two more renewal periods pass.
        await asyncio.sleep(0.7)
        assert not lost["released"].is_set(), "on_lost ran for a released lock"
        assert len(threads) == 2, f"on_lost ran {len(threads)} times for two losses"
        assert r("GET", name + ":taken") == b"another-owner", "the loser removed the new value"

    asyncio.run(main())


def test_ctrl_c_on_asyncio_run_ends_the_program_with_nothing_held(
    redis_server: RedisServer, name: str, r: Resp
) -> None:
    program = textwrap.dedent(
        f"""
        import asyncio, sys
        import redmutex.asyncio as aio

        async def main():
            client = aio.Client({redis_server.url!r})

            async def wait():
                async with client.lock({name!r}):
                    await asyncio.sleep(60)

            async with client.lock({name!r}):
                asyncio.create_task(wait())
                print("ready", flush=True)
                await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)  # the waiter waits on Redis meanwhile
        assert r("EXISTS", name) == 1
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - sent
    assert b"KeyboardInterrupt" in err, err.decode()
    # The holder released on its way out; the waiter, cancelled while it waited (or as it
    # got the lock), left nothing: no lock, no announcement (a release's wake-up signal lives
    # as long as the announcements it was for).
    deadline = time.monotonic() + 15
    while _keys(r, name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _keys(r, name) == [], _keys(r, name)
    print(f"the program ended {took:.2f} s after SIGINT")
    assert took < 5, f"the program ended {took:.1f} s after SIGINT"
