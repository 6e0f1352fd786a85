"""The servers users run: a smoke test of every kind of lock against each server of the
matrix (the rest of the suite runs against the distribution's redis-server), and a server
too old for the scripts refused at first use, naming its version."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import redmutex
from conftest import RedisServer, start_redis, stop, tool_server


def _server(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(str(tmp_path_factory.mktemp(name)), binary=tool_server(name))
    try:
        yield server
    finally:
        stop(server.process)


@pytest.fixture(scope="module", params=["redis-6.2", "redis-8.2", "valkey-8.1"])
def matrix_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    yield from _server(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def old_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from _server("redis-6.0", tmp_path_factory)


def test_every_kind_of_lock_works_on_each_server(matrix_server: RedisServer, name: str) -> None:
    client = redmutex.Client(matrix_server.url)
    lock = client.lock(name, ttl=5.0)
    assert lock.acquire()
    fence = lock.fence
    # A waiter gets the lock at the release.
    got: list[int] = []
    waiter = threading.Thread(
        target=lambda: got.append(int(client.lock(name).acquire(timeout=5.0)))
    )
    waiter.start()
    lock.extend(5.0)
    lock.release()
    waiter.join(10)
    assert got == [1]
    permits = [client.semaphore(name + ":sem", 2) for _ in range(3)]
    with permits[0], permits[1]:
        assert not permits[2].acquire(blocking=False)
    rw = client.rwlock(name + ":rw")
    with rw.read_lock():
        assert not rw.write_lock().acquire(blocking=False)
    with rw.write_lock():
        pass
    assert fence >= 1


def test_a_server_older_than_6_2_is_refused_naming_its_version(
    old_server: RedisServer, name: str
) -> None:
    client = redmutex.Client(old_server.url, connect_timeout=5.0)
    with pytest.raises(redmutex.ServerError) as caught:
        client.lock(name).acquire(timeout=5.0)
    said = f"{old_server.url} runs Redis 6.0.9; redmutex needs Redis 6.2 or later"
    assert said in str(caught.value)
    r = old_server.resp()
    try:
        assert r("KEYS", "*") == [], "nothing was written"
    finally:
        r.close()
