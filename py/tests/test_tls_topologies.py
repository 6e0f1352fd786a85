"""TLS to every topology from Python: a TLS-only Redis Cluster (rediss+cluster://) and a
TLS-only Sentinel group (rediss+sentinel://), started by the test support crate's
tls_fixture (scripts/test-py.sh builds it). The client's CA locks; a CA that signed nothing
raises a connection error about the certificate at once. Skipped only when redis-server was
built without TLS."""

from __future__ import annotations

import os
import pathlib
import subprocess
import time
from collections.abc import Iterator

import pytest

import redmutex

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fixture_binary() -> pathlib.Path:
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return pathlib.Path(os.environ.get("REDMUTEX_TLS_FIXTURE", target / "debug" / "tls_fixture"))


@pytest.fixture(scope="module")
def topologies() -> Iterator[dict[str, str]]:
    """The fixture's variables: the cluster's and the group's URLs, and the two CAs."""
    binary = fixture_binary()
    if not binary.exists():
        pytest.fail(f"{binary} is missing: cargo build -p redmutex-tests --bin tls_fixture")
    proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    found: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            line = line.strip()
            if line == "READY":
                break
            if line.startswith("SKIPPED:"):
                found["skipped"] = line
            elif "=" in line:
                key, value = line.split("=", 1)
                found[key] = value
            if time.monotonic() > deadline:
                pytest.fail("the TLS fixture is not ready after 60 s")
        else:
            pytest.fail(f"the TLS fixture exited: {proc.stderr.read() if proc.stderr else ''}")
        if "skipped" in found:
            pytest.skip(found["skipped"])
        yield found
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.parametrize("kind", ["CLUSTER", "SENTINEL"])
def test_a_tls_topology_locks_with_the_clients_ca(topologies: dict[str, str], kind: str) -> None:
    url = topologies[f"REDMUTEX_TEST_TLS_{kind}_URL"]
    ca = topologies["REDMUTEX_TEST_TLS_TOPOLOGY_CA"]
    client = redmutex.Client(url, tls_ca_cert=ca, connect_timeout=10.0)
    other = redmutex.Client(url, tls_ca_cert=pathlib.Path(ca).read_bytes())
    lock = client.lock(f"py:tls-{kind.lower()}", ttl=5.0)
    with lock:
        assert lock.owned()
        assert lock.fence is not None and lock.fence >= 1
        assert not other.lock(f"py:tls-{kind.lower()}").acquire(blocking=False)
    assert not lock.locked()


@pytest.mark.parametrize("kind", ["CLUSTER", "SENTINEL"])
def test_a_tls_topology_refuses_a_wrong_ca_at_once(topologies: dict[str, str], kind: str) -> None:
    url = topologies[f"REDMUTEX_TEST_TLS_{kind}_URL"]
    lock = redmutex.Client(url, tls_ca_cert=topologies["REDMUTEX_TEST_TLS_TOPOLOGY_OTHER_CA"],
                           connect_timeout=20.0).lock("py:tls-wrong-ca")
    started = time.monotonic()
    with pytest.raises(redmutex.LockConnectionError, match="certificate verification failed"):
        lock.acquire(timeout=30)
    # Waiting cannot fix a certificate: no riding over it for the 20 s connect timeout.
    assert time.monotonic() - started < 10
