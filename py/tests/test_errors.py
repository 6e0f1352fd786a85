"""Exceptions: the hierarchy, what each failure raises, and bad input (rejected before
anything is sent: the URLs here point where nothing listens, so a request would fail with a
connection error instead)."""

from __future__ import annotations

import math
import pickle
import signal
import time

import pytest

import redmutex


def test_hierarchy():
    for exc in (
        redmutex.LockLostError,
        redmutex.NoQuorumError,
        redmutex.LockConnectionError,
        redmutex.AuthenticationError,
        redmutex.NotHeldError,
        redmutex.ServerError,
    ):
        assert issubclass(exc, redmutex.LockError)
    assert issubclass(redmutex.LockError, Exception)
    assert issubclass(redmutex.LockConnectionError, ConnectionError)
    assert issubclass(redmutex.NotHeldError, RuntimeError)
    assert not issubclass(redmutex.LockLostError, RuntimeError)


def test_exceptions_pickle_by_name():
    # What multiprocessing does with an exception raised in a worker.
    for exc in (redmutex.LockLostError("gone"), redmutex.LockConnectionError("down")):
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc)
        assert str(again) == str(exc)


def test_connection_error(dead_url):
    lock = redmutex.Client(dead_url, connect_timeout=0.2).lock("x")
    with pytest.raises(redmutex.LockConnectionError) as info:
        lock.acquire(blocking=False)
    assert isinstance(info.value, ConnectionError)
    t0 = time.monotonic()
    with pytest.raises(redmutex.LockConnectionError):
        lock.acquire()  # rides over the outage for connect_timeout, then gives up
    assert time.monotonic() - t0 < 3
    with pytest.raises(redmutex.LockConnectionError):
        lock.locked()


def test_no_quorum(redis_server, dead_url):
    from conftest import closed_port

    with closed_port() as s:
        urls = [redis_server.url, dead_url, f"redis://127.0.0.1:{s.getsockname()[1]}"]
        lock = redmutex.Client(urls, connect_timeout=0.2).lock("test:no-quorum")
        with pytest.raises(redmutex.NoQuorumError) as info:
            lock.acquire(timeout=2)
    assert dead_url in str(info.value)


def test_no_quorum_tells_a_node_not_waited_for_from_an_unreachable_one(tmp_path):
    """A round ends as soon as no majority can grant: two of three nodes fail at once (their
    fence counter holds no number) and the third, frozen (SIGSTOP), is not waited for. Its
    report says so instead of calling a node unreachable that nothing showed to be."""
    from conftest import start_redis, stop

    servers = [start_redis(str(tmp_path)) for _ in range(3)]
    try:
        name = "test:not-waited-for"
        lock = redmutex.Client([s.url for s in servers]).lock(name, ttl=10)
        assert lock.acquire(blocking=False)  # pooled connections to every node
        lock.release()
        for s in servers[:2]:
            r = s.resp()
            r("SET", "{" + name + "}:fence", "not a number")
            r.close()
        frozen = servers[2]
        frozen.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(redmutex.NoQuorumError) as info:
                lock.acquire(blocking=False)
        finally:
            frozen.process.send_signal(signal.SIGCONT)
        message = str(info.value)
        assert f"{frozen.url}: not waited for" in message, message
        assert "unreachable" not in message, message
        for s in servers[:2]:
            assert f"{s.url}: error" in message, message
        assert not lock.owned()
    finally:
        for s in servers:
            stop(s.process)


def test_authentication_error(redis_server):
    url = f"redis://nobody:wrong@127.0.0.1:{redis_server.port}"
    lock = redmutex.Client(url).lock("test:auth")
    with pytest.raises(redmutex.AuthenticationError) as info:
        lock.acquire(blocking=False)
    assert "wrong" not in str(info.value)


def test_server_error(client, name, r):
    r("SET", "{" + name + "}:fence", "not a number")
    lock = client.lock(name, ttl=0.5)
    with pytest.raises(redmutex.ServerError):
        lock.acquire(blocking=False)
    assert not lock.owned()


@pytest.mark.parametrize("url", [123, None, b"redis://127.0.0.1", ["redis://127.0.0.1", 5]])
def test_client_url_type(url):
    with pytest.raises(TypeError, match="url"):
        redmutex.Client(url)


@pytest.mark.parametrize("url", [[], "", "ftp://127.0.0.1", "redis://"])
def test_client_url_value(url):
    with pytest.raises(ValueError):
        redmutex.Client(url)


@pytest.mark.parametrize("key", ["connect_timeout", "node_timeout"])
@pytest.mark.parametrize("value", [-1, 0, math.nan, math.inf, 1e300, 10**400])
def test_client_timeout_values(dead_url, key, value):
    with pytest.raises(ValueError, match=key):
        redmutex.Client(dead_url, **{key: value})


@pytest.mark.parametrize("key", ["connect_timeout", "node_timeout"])
@pytest.mark.parametrize("value", ["1", True, [1]])
def test_client_timeout_types(dead_url, key, value):
    with pytest.raises(TypeError, match=key):
        redmutex.Client(dead_url, **{key: value})


def test_client_owner(dead_url):
    with pytest.raises(ValueError):
        redmutex.Client(dead_url, owner="has space")
    with pytest.raises(ValueError):
        redmutex.Client(dead_url, owner="")
    with pytest.raises(TypeError):
        redmutex.Client(dead_url, owner=5)
    with pytest.raises(TypeError):
        redmutex.Client(dead_url, "positional")


def test_lock_name(dead_url):
    client = redmutex.Client(dead_url)
    for bad in (123, None, bytearray(b"x"), ["x"]):
        with pytest.raises(TypeError, match="name"):
            client.lock(bad)
    for bad in ("", b"", "x" * 513):
        with pytest.raises(ValueError, match="name"):
            client.lock(bad)
    with pytest.raises(ValueError):
        client.lock("\udcff")  # not encodable as UTF-8
    assert client.lock("x" * 512).name == "x" * 512


@pytest.mark.parametrize("ttl", [math.nan, -1, 0, 0.001, math.inf, -math.inf, 1e300, 10**400, 86401])
def test_lock_ttl_values(dead_url, ttl):
    client = redmutex.Client(dead_url)
    with pytest.raises(ValueError, match="ttl"):
        client.lock("x", ttl)
    with pytest.raises(ValueError, match="ttl"):
        client.lock("x", ttl=ttl)


@pytest.mark.parametrize("ttl", ["30", True, None.__class__, [1]])
def test_lock_ttl_types(dead_url, ttl):
    with pytest.raises(TypeError, match="ttl"):
        redmutex.Client(dead_url).lock("x", ttl=ttl)


def test_lock_options(dead_url):
    client = redmutex.Client(dead_url)
    for bad in (math.nan, -1, 0, 1e300):
        with pytest.raises(ValueError, match="max_hold"):
            client.lock("x", max_hold=bad)
    with pytest.raises(TypeError):
        client.lock("x", on_lost=5)
    with pytest.raises(TypeError):
        client.lock("x", auto_renew=1)
    with pytest.raises(TypeError):
        client.lock("x", 30, True)  # the options are keyword-only
    lock = client.lock("x", ttl=1, max_hold=None, on_lost=None, auto_renew=False, fencing=False)
    assert lock.ttl == 1.0


def test_min_replicas_arguments(dead_url):
    client = redmutex.Client(dead_url)
    for bad in (5, "1:0.1", (1,), (1, 0.1, 2), (True, 0.1), (1.5, 0.1), (1, "x")):
        with pytest.raises(TypeError, match="min_replicas"):
            client.lock("x", min_replicas=bad)
    for bad in ((0, 0.1), (-1, 0.1), (1, 0), (1, math.nan), (1, -1), (1, 20)):
        with pytest.raises(ValueError, match="min_replicas"):
            client.lock("x", ttl=30, min_replicas=bad)
    client.lock("x", min_replicas=None)
    client.lock("x", ttl=1, min_replicas=(1, 0.5))


def test_acquire_arguments(dead_url):
    lock = redmutex.Client(dead_url).lock("x")
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(False, 0)
    for bad in (-2, -0.5, math.nan, -math.inf):
        with pytest.raises(ValueError, match="timeout"):
            lock.acquire(timeout=bad)
    for bad in ("1", True, [1]):
        with pytest.raises(TypeError, match="timeout"):
            lock.acquire(timeout=bad)
    with pytest.raises(ValueError, match="ttl"):
        lock.extend(math.nan)
    with pytest.raises(TypeError, match="ttl"):
        lock.extend("5")
    with pytest.raises(ValueError, match="timeout"):
        lock.wait_lost(-1)
