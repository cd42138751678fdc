"""A whole migration (zk -> etcd, zk -> oxia, oxia -> zk) beneath stock ZooKeeper clients: kazoo
clients connected to the agents' ZooKeeper ports, and an Apache Curator client
(``tests/java/CuratorProbe.java``, holding an InterProcessMutex and an ephemeral PersistentNode),
keep writing, hold locks and ephemerals throughout; the migration COMPLETES with no client error,
no session expiry, every acknowledged write in the target, and every lock still held by its owner.
The versions a client read before the switch are the versions after it: a setData with a version
read before the switch succeeds after it (on Oxia a version is the record's count of writes, not
its shard-wide ``version_id``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from metashift.coordinator import control
from metashift.migration.phase import Phase
from metashift_lab.sample_tree import generate
from tests.cluster import Cluster
from tests.harness import Gateways, eventually
from tests.oxia_raw import raw_record
from tests.zkjava import CuratorHolder, JavaProgram

pytestmark = pytest.mark.timeout(900)


@dataclass
class ZkWriter:
    """One kazoo client of one agent: an ephemeral and a lock held all along, a compare-and-set
    counter, creates and sequential creates; every acknowledged write remembered."""

    node_id: str
    hosts: str
    client: KazooClient | None = None
    acked: dict[str, bytes] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    lock: object = None
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def setup(self) -> None:
        k = KazooClient(hosts=self.hosts, timeout=10)
        k.add_listener(lambda s: self.states.append(s))
        k.start(timeout=15)
        self.client = k
        k.ensure_path("/zkclients")
        k.create(f"/zkclients/{self.node_id}", self.node_id.encode(), ephemeral=True)
        self.lock = k.Lock(f"/zklocks/{self.node_id}", self.node_id)
        assert self.lock.acquire(timeout=10)  # type: ignore[attr-defined]

    def run(self) -> None:
        k = self.client
        assert k is not None
        base = f"/zkwriters/{self.node_id}"
        counter = f"{base}/counter"
        k.ensure_path(base)
        k.create(counter, b"0")
        self.acked[counter] = b"0"
        version = 0
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                version = k.set(counter, str(i).encode(), version=version).version
                self.acked[counter] = str(i).encode()
                item = f"{base}/item-{i}"
                k.create(item, b"v%d" % i)
                self.acked[item] = b"v%d" % i
                if i % 5 == 0:
                    seq = k.create(f"{base}/seq-", b"s", sequence=True)
                    self.acked[seq] = b"s"
            except KazooException as e:
                self.errors.append(repr(e))
                return
            self.stop.wait(0.02)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name=f"zkwriter-{self.node_id}", daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(120)

    def close(self) -> None:
        self.stop.set()
        if self.client is not None:
            try:
                self.client.stop()
                self.client.close()
            except Exception:
                pass


@pytest.fixture(params=["zk-to-etcd", "zk-to-oxia", "oxia-to-zk"])
async def cluster(request: pytest.FixtureRequest, gateways: Gateways, namespace: str) -> AsyncIterator[Cluster]:
    src, dst = request.param.split("-to-")
    source_url = request.getfixturevalue(f"{src}_server").url + namespace + "-src"
    target_url = request.getfixturevalue(f"{dst}_server").url + namespace + "-dst"
    c = Cluster(gateways, source_url, target_url)
    yield c
    await c.close()


#: A node rewritten before the migration; its version is read through the front before the switch.
VERSIONED = "/versioned/node"


def _versions_before(k: KazooClient) -> int:
    """Write ``VERSIONED`` a few times (other nodes between, so that on Oxia its shard-wide
    ``version_id`` runs ahead of its count of writes) and read its version as a client caches it."""
    k.create(VERSIONED, b"0", makepath=True)
    for i in range(1, 5):
        k.create(f"/versioned/other-{i}", b"x")
        k.set(VERSIONED, str(i).encode())
    _, stat = k.get(VERSIONED)
    assert stat.version == 4
    return int(stat.version)


def _curator_writes(holder: CuratorHolder, more_than: int) -> bool:
    """The Curator client has more than ``more_than`` acknowledged writes, or has stopped (an
    error, an exit: the test's assertions say which)."""
    return len(holder.tagged("ACK")) > more_than or bool(holder.errors) or holder.proc.returncode is not None


async def test_migration_beneath_kazoo_and_curator_clients(
    cluster: Cluster, curator_probe: JavaProgram, curator_holders: list[CuratorHolder], tmp_path: Path
) -> None:
    source = await cluster.source()
    await generate(source, 5, seed=1, ephemerals=False)
    await cluster.start(settings={"zookeeper.listen": "127.0.0.1:0"})
    writers = [ZkWriter(node_id, agent.zookeeper.address) for node_id, agent in cluster.agents.items()]
    try:
        for w in writers:
            await asyncio.to_thread(w.setup)
            w.start()
        curator = await CuratorHolder.start(curator_probe, cluster.agents["broker-2"].zookeeper.address, "curator-1",
                                            tmp_path / "curator.stderr")
        curator_holders.append(curator)
        await eventually(lambda: all(len(w.acked) > 5 for w in writers), within=60, what="kazoo writers write")
        await eventually(lambda: _curator_writes(curator, 5), within=120, what="the Curator client writes")
        assert curator.errors == [] and curator.proc.returncode is None, curator.lines
        [lock_node], [ephemeral] = curator.tagged("LOCKED"), curator.tagged("EPHEMERAL")
        first = writers[0].client
        assert first is not None
        read_before = await asyncio.to_thread(_versions_before, first)
        if source.url.scheme == "oxia":  # a broker reading Oxia natively sees another number
            raw = await raw_record(source, VERSIONED)
            assert raw.version.modifications_count == read_before < raw.version.version_id, raw.version
        await control.start(source, cluster.target_url)
        status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
        assert status["phase"] == "COMPLETED", status
        await eventually(cluster.all_on_target, what="agents serve from the target")
        # a compare-and-set with the version read before the switch, on the target now
        other = writers[1].client
        assert other is not None
        after = await asyncio.to_thread(other.set, VERSIONED, b"after the switch", read_before)
        assert after.version == read_before + 1
        marks = {w.node_id: len(w.acked) for w in writers}
        curator_mark = len(curator.tagged("ACK"))
        await eventually(lambda: any(w.errors for w in writers)
                         or all(len(w.acked) > marks[w.node_id] + 5 for w in writers), within=60,
                         what="kazoo writers keep writing after the switch")
        await eventually(lambda: _curator_writes(curator, curator_mark + 5), within=60,
                         what="the Curator client keeps writing after the switch")
        assert [w.errors for w in writers if w.errors] == []
        assert curator.errors == [], curator.lines[-20:]
        target = await cluster.open(cluster.target_url)
        got = await target.get(VERSIONED)
        assert got is not None and (got[0], got[1].version) == (b"after the switch", read_before + 1)
        # the Curator client's lock node and ephemeral are in the target, ephemeral, while it holds them
        for path in (lock_node, ephemeral):
            got = await target.get(path)
            assert got is not None and got[1].ephemeral, (path, got)
        for w in writers:
            await asyncio.to_thread(w.finish)
        assert await curator.stop() == 0, curator.lines[-20:]
        assert curator.errors == []
        assert "LOST" not in curator.tagged("STATE"), curator.tagged("STATE")
        # its lock was its own to the end: held, first in line, and a newcomer could not take it
        assert curator.tagged("HELD") == ["true"] and curator.tagged("FIRST") == [lock_node]
        assert curator.tagged("NEWCOMER_ACQUIRES") == ["false"]
        for path, value in curator.acked.items():
            got = await target.get(path)
            assert got is not None and got[0] == value, (path, value, got)
        for w in writers:
            assert w.errors == [], (w.node_id, w.errors)
            assert KazooState.LOST not in w.states, (w.node_id, w.states)
            for path, value in w.acked.items():
                got = await target.get(path)
                assert got is not None and got[0] == value, (path, value, got)
            got = await target.get(f"/zkclients/{w.node_id}")
            assert got is not None and got[1].ephemeral
            # the lock is still its owner's: its node is in the target, first in line, and a newcomer
            # contending now waits behind it
            lock = w.lock
            assert lock.is_acquired  # type: ignore[attr-defined]
            contenders = await asyncio.to_thread(lock.contenders)  # type: ignore[attr-defined]
            assert contenders and contenders[0] == w.node_id
        newcomer = ZkWriter("newcomer", writers[0].hosts)

        def contend() -> bool:
            k = KazooClient(hosts=newcomer.hosts, timeout=10)
            k.start(timeout=15)
            newcomer.client = k
            return bool(k.Lock(f"/zklocks/{writers[0].node_id}", "newcomer").acquire(blocking=False))

        assert await asyncio.to_thread(contend) is False
        await asyncio.to_thread(newcomer.close)
    finally:
        for w in writers:
            await asyncio.to_thread(w.close)
