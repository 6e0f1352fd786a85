"""A Redis Cluster as one voter (redis+cluster:// URLs), against a real three-master cluster:
every lock lives on the master that owns its name's hash slot."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

import redmutex
from conftest import RedisCluster
from resp import Resp

OWNER = "cluster-test"


class Masters:
    """Plain connections to every master, and which one owns each slot (CLUSTER SLOTS)."""

    def __init__(self, cluster: RedisCluster) -> None:
        self.conns = {port: Resp(port) for port in cluster.ports}
        self.owner = [0] * 16384
        slots = self.conns[cluster.ports[0]]("CLUSTER", "SLOTS")
        assert isinstance(slots, list)
        for start, end, master, *_replicas in slots:
            for slot in range(start, end + 1):
                self.owner[slot] = int(master[1])
        assert all(self.owner), "some slots have no master"
        assert set(self.owner) == set(cluster.ports)

    def slot(self, key: str) -> int:
        slot = next(iter(self.conns.values()))("CLUSTER", "KEYSLOT", key)
        assert isinstance(slot, int)
        return slot

    def on_owner(self, key: str) -> Resp:
        """A connection to the master that serves `key`."""
        return self.conns[self.owner[self.slot(key)]]

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


@pytest.fixture
def masters(redis_cluster: RedisCluster) -> Iterator[Masters]:
    m = Masters(redis_cluster)
    yield m
    m.close()


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> redmutex.Client:
    return redmutex.Client(redis_cluster.url, owner=OWNER)


def spread_names(masters: Masters, per_master: int) -> dict[int, list[str]]:
    """`per_master` fresh names for each master, by the port of the master that serves it."""
    names: dict[int, list[str]] = {port: [] for port in masters.conns}
    prefix = f"test:cluster:{uuid.uuid4().hex[:8]}"
    i = 0
    while any(len(n) < per_master for n in names.values()):
        name = f"{prefix}:{i}"
        i += 1
        chosen = names[masters.owner[masters.slot(name)]]
        if len(chosen) < per_master:
            chosen.append(name)
    return names


def lock_names_on_every_master(client: redmutex.Client, masters: Masters) -> None:
    by_master = spread_names(masters, 7)
    names = [n for ns in by_master.values() for n in ns][:20]
    assert len(names) == 20
    assert all(sum(n in ns for n in names) >= 6 for ns in by_master.values())

    locks = [client.lock(n) for n in names]
    for lock in locks:
        assert lock.acquire(blocking=False) is True
    for lock in locks:
        name = lock.name
        assert isinstance(name, str)
        owner = masters.on_owner(name)
        value = owner("GET", name)
        assert isinstance(value, bytes) and value.startswith(OWNER.encode() + b":")
        assert 0 < owner("PTTL", name) <= 30_000
        assert owner("GET", "{" + name + "}:fence") == str(lock.fence).encode()
        assert lock.locked() and lock.owned()
    for lock in locks:
        lock.release()
        name = lock.name
        assert isinstance(name, str)
        assert masters.on_owner(name)("EXISTS", name) == 0
        assert not lock.locked()


def test_lock_and_release_on_every_master(cluster_client, masters):
    lock_names_on_every_master(cluster_client, masters)


def test_one_seed_finds_every_master(redis_cluster, masters):
    client = redmutex.Client(f"redis+cluster://127.0.0.1:{redis_cluster.ports[-1]}", owner=OWNER)
    lock_names_on_every_master(client, masters)


def test_client_describes_the_cluster(cluster_client):
    assert len(cluster_client.nodes) == 1
    assert cluster_client.quorum == 1


def test_second_client_would_block(redis_cluster, cluster_client, name):
    holder = cluster_client.lock(name)
    other = redmutex.Client(redis_cluster.url).lock(name)
    assert holder.acquire(blocking=False) is True
    assert other.acquire(blocking=False) is False
    assert other.acquire(timeout=0.2) is False
    assert not other.owned()
    assert other.locked()
    assert holder.owned()
    holder.release()
    # other waited, so the lock is reserved for waiters for a moment: take it as a waiter.
    assert other.acquire(timeout=1) is True
    other.release()


def test_fence_increases(redis_cluster, name, masters):
    clients = [redmutex.Client(redis_cluster.url) for _ in range(2)]
    fences = []
    for i in range(6):
        lock = clients[i % 2].lock(name)
        assert lock.acquire(timeout=1)
        fences.append(lock.fence)
        lock.release()
    assert fences == sorted(set(fences))
    assert masters.on_owner(name)("GET", "{" + name + "}:fence") == str(fences[-1]).encode()


def test_context_manager(cluster_client, name, masters):
    with cluster_client.lock(name) as lock:
        assert lock.owned()
        assert masters.on_owner(name)("GET", name).startswith(OWNER.encode() + b":")
        fence = lock.fence
    assert not lock.owned()
    assert not lock.locked()
    with cluster_client.lock(name) as again:
        assert again.fence > fence


@pytest.mark.parametrize("suffix", ["{user:1}:lock", "a}b", "}", "{}x", "x{", "{a}{b}"])
def test_names_with_braces(cluster_client, name, suffix):
    # Every key of a lock must share its slot, or the cluster refuses with CROSSSLOT.
    lock = cluster_client.lock(f"{name}:{suffix}")
    assert lock.acquire(blocking=False)
    assert lock.fence >= 1
    lock.release()


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://h:0",
        "redis+cluster://h/1",
        "rediss+cluster://h:1#verify",
        "redis+cluster://",
        "redis+cluster://h:1,",
        "redis+cluster://h:99999",
        "redis+cluster://h:1?timeout=1",
        "redis+cluster://u:hunter2@h/2",
    ],
)
def test_malformed_cluster_url(url):
    with pytest.raises(ValueError, match="Redis Cluster") as info:
        redmutex.Client(url)
    assert "hunter2" not in str(info.value)



def waiting(conn: Resp) -> tuple[int, int]:
    """A master's connections that wait now (blocked in BLPOP, or listening on sharded
    channels), and the waits they serve (one per BLPOP, one per channel)."""
    listing = conn("CLIENT", "LIST")
    assert isinstance(listing, bytes)
    connections = waits = 0
    for line in listing.decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split(" ") if "=" in f)
        blocked = fields.get("cmd") == "blpop" and "b" in fields.get("flags", "")
        channels = int(fields.get("ssub", "0"))
        if blocked or channels:
            connections += 1
            waits += int(blocked) + channels
    return connections, waits


def test_waiting_threads_share_one_connection_per_master(redis_cluster, masters):
    # Four threads per master wait on names of different slots (a Cluster refuses one BLPOP
    # over several slots): each master sees at most two of the client's connections waiting
    # (one blocked in BLPOP, one listening on sharded pub/sub for the others), and each
    # release wakes its name's waiter.
    by_master = spread_names(masters, 4)
    names = [n for ns in by_master.values() for n in ns]
    holder = redmutex.Client(redis_cluster.url)
    waiter = redmutex.Client(redis_cluster.url)
    held = [holder.lock(n, ttl=3600) for n in names]
    for lock in held:
        assert lock.acquire(blocking=False)
    got: list[str] = []
    done = threading.Condition()

    def wait(name: str) -> None:
        lock = waiter.lock(name)
        assert lock.acquire(timeout=60)
        with done:
            got.append(name)
            done.notify_all()
        lock.release()

    threads = [threading.Thread(target=wait, args=(n,)) for n in names]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while sum(waiting(c)[1] for c in masters.conns.values()) < len(names):
        assert time.monotonic() < deadline, "not every thread waits"
        time.sleep(0.05)
    for port, conn in masters.conns.items():
        assert waiting(conn)[0] <= 2, f"master {port}"
    for lock in held:
        lock.release()
        with done:
            assert done.wait_for(lambda: lock.name in got, timeout=20), f"{lock.name} woke nobody"
    for t in threads:
        t.join(timeout=20)
        assert not t.is_alive()
    assert sorted(got) == sorted(names)
