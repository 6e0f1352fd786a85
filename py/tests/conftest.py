"""Fixtures: one real redis-server for the session, on a free loopback port (never 6379),
keeping nothing on disk, stopped by pid at the end."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import redmutex
from resp import Resp


def free_port() -> int:
    """A port nobody listens on, below Linux's ephemeral range (32768+) so that outgoing
    connections don't take it before the server binds it."""
    for _ in range(100):
        port = random.randint(20000, 31999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port")


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def resp(self) -> Resp:
        return Resp(self.port)


def start_redis(workdir: str) -> RedisServer:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server not found; run make deps")
    for _ in range(10):
        port = free_port()
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                r = Resp(port, timeout=0.5)
            except OSError:
                time.sleep(0.02)
                continue
            try:
                if r("PING") == "PONG":
                    return RedisServer(port, proc)
            except (OSError, ConnectionError):
                pass
            finally:
                r.close()
            time.sleep(0.02)
        stop(proc)  # lost a race for the port, or too slow: try another port
    pytest.fail("could not start redis-server")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    workdir = tempfile.mkdtemp(prefix="redmutex-py-")
    server = start_redis(workdir)
    try:
        yield server
    finally:
        stop(server.process)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[Resp]:
    """A plain connection to the test server, for checks behind redmutex's back."""
    conn = redis_server.resp()
    yield conn
    conn.close()


@pytest.fixture
def client(redis_server: RedisServer) -> redmutex.Client:
    return redmutex.Client(redis_server.url)


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock name of its own for each test."""
    return f"test:{request.node.name}:{uuid.uuid4().hex[:8]}"


@pytest.fixture
def dead_url() -> str:
    """A URL where nothing listens: anything sent there fails with a connection error."""
    return f"redis://127.0.0.1:{free_port()}"
