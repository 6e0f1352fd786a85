"""Fixtures: real redis-servers for the session (one server, and a three-master Redis
Cluster when a test asks for it), on free loopback ports (never 6379), keeping nothing on
disk, stopped by pid at the end."""

from __future__ import annotations

import pathlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
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


def tool_server(name: str) -> str:
    """One of the servers scripts/servers.sh fetches into .tools/servers (redis-6.0,
    redis-6.2, redis-8.2, valkey-8.1)."""
    directory = pathlib.Path(__file__).resolve().parents[2] / ".tools" / "servers" / name
    for binary in ("redis-server", "valkey-server"):
        if (directory / binary).is_file():
            return str(directory / binary)
    pytest.fail(f"no {name} server in {directory}: run scripts/servers.sh install")


def start_redis(
    workdir: str,
    extra_args: Callable[[int], Sequence[str]] = lambda port: (),
    binary: str = "redis-server",
) -> RedisServer:
    """A redis-server (or `binary`) on a free port; `extra_args(port)` gives more
    command-line options."""
    if shutil.which(binary) is None:
        pytest.fail(f"{binary} not found; run make deps")
    for _ in range(10):
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", workdir, *extra_args(port)],
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
        stop(proc)  # lost a race for a port, or too slow: try other ports
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


def cluster_node_args(port: int) -> list[str]:
    """Options of a cluster-enabled server: its own config file in the shared workdir, and
    a cluster bus on a second free port (Redis' default, port + 10000, may be out of range or
    taken)."""
    bus = free_port()
    while bus == port:
        bus = free_port()
    return ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
            "--cluster-node-timeout", "2000", "--cluster-port", str(bus)]


@dataclass
class RedisCluster:
    """A Redis Cluster of masters only (no replicas), with the usual slot split."""

    servers: list[RedisServer]

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)


def cluster_state(port: int) -> str | None:
    """The cluster_state field of CLUSTER INFO on one node, or None if it did not answer."""
    try:
        r = Resp(port, timeout=1)
    except OSError:
        return None
    try:
        info = r("CLUSTER", "INFO")
    except (OSError, ConnectionError):
        return None
    finally:
        r.close()
    assert isinstance(info, bytes)
    for line in info.decode().splitlines():
        if line.startswith("cluster_state:"):
            return line.split(":", 1)[1]
    return None


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    if shutil.which("redis-cli") is None:
        pytest.fail("redis-cli not found; run make deps")
    workdir = tempfile.mkdtemp(prefix="redmutex-py-cluster-")
    servers: list[RedisServer] = []
    try:
        for _ in range(3):
            servers.append(start_redis(workdir, cluster_node_args))
        cluster = RedisCluster(servers)
        addrs = [f"127.0.0.1:{p}" for p in cluster.ports]
        try:
            # redis-cli waits for the nodes to agree with no limit of its own.
            created = subprocess.run(
                ["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "0",
                 "--cluster-yes"],
                capture_output=True, timeout=30, check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("redis-cli --cluster create did not finish within 30 s")
        if created.returncode != 0:
            pytest.fail("redis-cli --cluster create failed:\n"
                        + created.stdout.decode(errors="replace")
                        + created.stderr.decode(errors="replace"))
        deadline = time.monotonic() + 10
        for port in cluster.ports:
            while (state := cluster_state(port)) != "ok":
                if time.monotonic() > deadline:
                    pytest.fail(f"cluster node {port} reports cluster_state:{state} after 10 s")
                time.sleep(0.05)
        yield cluster
    finally:
        for server in servers:
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


def closed_port() -> socket.socket:
    """A loopback port that refuses connections: bound by this process and never listened
    on, so that no other test's server can take it while the socket is open (a port found
    free is free only until someone binds it)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A URL where nothing listens: anything sent there fails with a connection error."""
    with closed_port() as s:
        yield f"redis://127.0.0.1:{s.getsockname()[1]}"
