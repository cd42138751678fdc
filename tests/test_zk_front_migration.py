"""A whole zk -> etcd migration beneath stock ZooKeeper clients: kazoo clients connected to the
agents' ZooKeeper ports keep writing, hold locks and ephemerals throughout; the migration
COMPLETES with no client error, no session expiry, every acknowledged write in etcd, and every
lock still held by its owner."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from metashift.coordinator import control
from metashift.migration.phase import Phase
from metashift.sample_tree import generate
from tests.cluster import Cluster
from tests.harness import Gateways, eventually

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


@pytest.fixture
async def cluster(gateways: Gateways, zk_url: str, etcd_url: str) -> AsyncIterator[Cluster]:
    c = Cluster(gateways, zk_url, etcd_url)
    yield c
    await c.close()


async def test_migration_beneath_kazoo_clients(cluster: Cluster) -> None:
    source = await cluster.source()
    await generate(source, 5, seed=1, ephemerals=False)
    await cluster.start(settings={"zookeeper.listen": "127.0.0.1:0"})
    writers = [ZkWriter(node_id, agent.zookeeper.address) for node_id, agent in cluster.agents.items()]
    try:
        for w in writers:
            await asyncio.to_thread(w.setup)
            w.start()
        await eventually(lambda: all(len(w.acked) > 5 for w in writers), within=60, what="kazoo writers write")
        await control.start(source, cluster.target_url)
        status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
        assert status["phase"] == "COMPLETED", status
        await eventually(cluster.all_on_target, what="agents serve from the target")
        marks = {w.node_id: len(w.acked) for w in writers}
        await eventually(lambda: any(w.errors for w in writers)
                         or all(len(w.acked) > marks[w.node_id] + 5 for w in writers), within=60,
                         what="kazoo writers keep writing after the switch")
        assert [w.errors for w in writers if w.errors] == []
        for w in writers:
            await asyncio.to_thread(w.finish)
        target = await cluster.open(cluster.target_url)
        for w in writers:
            assert w.errors == [], (w.node_id, w.errors)
            assert KazooState.LOST not in w.states, (w.node_id, w.states)
            for path, value in w.acked.items():
                got = await target.get(path)
                assert got is not None and got[0] == value, (path, value, got)
            got = await target.get(f"/zkclients/{w.node_id}")
            assert got is not None and got[1].ephemeral
            # the lock is still its owner's: its node is in etcd, first in line, and a newcomer
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
