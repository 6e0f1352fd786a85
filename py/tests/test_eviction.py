"""A Redis whose maxmemory-policy may evict locks: a RuntimeWarning once per server, or
refused at once with require_noeviction=True."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest

import redmutex
from conftest import RedisServer, start_redis, stop


@pytest.fixture(scope="module")
def evicting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of its own whose maxmemory-policy is allkeys-lru."""
    server = start_redis(
        str(tmp_path_factory.mktemp("evict")),
        lambda port: ["--maxmemory-policy", "allkeys-lru"],
    )
    try:
        yield server
    finally:
        stop(server.process)


def test_an_evicting_server_is_warned_of_once(evicting: RedisServer, name: str) -> None:
    client = redmutex.Client(evicting.url)
    with pytest.warns(RuntimeWarning, match="maxmemory-policy allkeys-lru") as said:
        for _ in range(3):
            with client.lock(name):
                pass
    assert len([w for w in said if issubclass(w.category, RuntimeWarning)]) == 1


def test_an_evicting_server_is_refused_when_required(evicting: RedisServer, name: str) -> None:
    client = redmutex.Client(evicting.url, require_noeviction=True, connect_timeout=5.0)
    lock = client.lock(name)
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(redmutex.ServerError, match="maxmemory-policy allkeys-lru"):
            lock.acquire(timeout=10)
    assert time.monotonic() - started < 3
    assert not lock.owned()


def test_require_noeviction_takes_a_bool_only(redis_server: RedisServer) -> None:
    with pytest.raises(TypeError):
        redmutex.Client(redis_server.url, require_noeviction="yes")  # type: ignore[arg-type]
