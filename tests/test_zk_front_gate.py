"""A ZooKeeper client's write held by the agent's write gate waits, and its session lives on:
pings are answered while the write is held, longer than the session timeout. Reads wait too,
and read where the gate opens."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from metashift import MetadataStore
from tests.harness import Gateways, eventually


async def test_held_write_waits_and_session_never_expires(gateways: Gateways, zk_url: str) -> None:
    agent = await gateways.start(zk_url, {"zookeeper.listen": "127.0.0.1:0", "gate.hold_timeout": 120.0})
    k = KazooClient(hosts=agent.zookeeper.address, timeout=4)
    states: list[str] = []
    k.add_listener(lambda s: states.append(s))
    await asyncio.to_thread(k.start, 15)
    try:
        await asyncio.to_thread(k.create, "/held", b"0")
        await asyncio.to_thread(k.create, "/held/eph", b"", ephemeral=True)
        await agent.gate.close()
        done = threading.Event()
        result: list[object] = []
        def held_write() -> None:
            result.append(k.set("/held", b"1", version=0))
            done.set()

        writer = threading.Thread(target=held_write)
        writer.start()
        await eventually(lambda: agent.gate.held == 1, what="the write is held")
        negotiated = k._session_timeout / 1000  # what the agent granted
        await asyncio.sleep(2 * negotiated)  # twice the session timeout with the write held
        assert not done.is_set()
        assert KazooState.LOST not in states and KazooState.SUSPENDED not in states, states
        assert len(agent.zookeeper.sessions.by_id) == 1
        await agent.gate.open()
        await eventually(done.is_set, what="the held write completes once the gate opens")
        writer.join()
        assert result[0].version == 1  # type: ignore[attr-defined]
        stat = await asyncio.to_thread(k.exists, "/held/eph")
        assert stat is not None and stat.ephemeralOwner == k.client_id[0]
    finally:
        await asyncio.to_thread(k.stop)
        await asyncio.to_thread(k.close)


async def test_held_read_is_answered_from_the_store_the_gate_opens_towards(
    gateways: Gateways, zk_url: str, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    """A ZooKeeper client's read waits while the gate is closed for a freeze (the forwarded path
    and the ordinary path alike), then reads where the gate opened: the target's value, never
    the frozen source's."""
    agent = await gateways.start(zk_url, {"zookeeper.listen": "127.0.0.1:0"})
    target: MetadataStore = await open_stores(etcd_url)
    await target.put("/r", b"target", expected_version=-1)
    k = KazooClient(hosts=agent.zookeeper.address, timeout=10)
    await asyncio.to_thread(k.start, 15)
    try:
        await asyncio.to_thread(k.create, "/r", b"source")
        await agent.gate.close()
        reads = [k.get_async("/r"), k.exists_async("/r"), k.get_children_async("/r")]
        await asyncio.sleep(0.3)
        assert not any(r.ready() for r in reads)
        await agent.gate.open(towards=target)
        value, stat = await asyncio.to_thread(reads[0].get, True, 30)
        assert value == b"target" and stat.version == 0
        assert (await asyncio.to_thread(reads[1].get, True, 30)) is not None
        assert await asyncio.to_thread(reads[2].get, True, 30) == []
        assert agent.gate.reads_held_total >= 1
    finally:
        await asyncio.to_thread(k.stop)
        await asyncio.to_thread(k.close)


async def test_a_passed_through_write_whose_lease_lapsed_meanwhile_is_outcome_unknown(
    gateways: Gateways, zk_url: str, open_stores: Callable[..., Any]
) -> None:
    """A write passed through to a ZooKeeper source (the front's fast path) was admitted while
    the heartbeat lease held, and ZooKeeper's OK comes after it lapsed: a migration may have gone
    on without this agent, so the client is told CONNECTIONLOSS (the outcome unknown), never OK,
    though the write is in the source. The lease's first look is the admission's, every later
    one finds it lapsed; the owner hears of the lapse."""
    from kazoo.exceptions import ConnectionLoss

    agent = await gateways.start(zk_url, {"zookeeper.listen": "127.0.0.1:0"})
    k = KazooClient(hosts=agent.zookeeper.address, timeout=10)
    await asyncio.to_thread(k.start, 15)
    looks: list[bool] = []
    lapses: list[bool] = []

    def lease() -> bool:
        looks.append(not looks)  # true once: at the admission
        return looks[-1]

    try:
        agent.gate.fence_with(lease, lambda: lapses.append(True))
        try:
            await asyncio.to_thread(k.create, "/lapsed", b"v")
            raise AssertionError("a write acknowledged after the lease lapsed")
        except ConnectionLoss:
            pass
        assert looks[:2] == [True, False] and lapses, (looks, lapses)
        source = await open_stores(zk_url)
        got = await source.get("/lapsed")
        assert got is not None and got[0] == b"v", got
    finally:
        await asyncio.to_thread(k.stop)
        await asyncio.to_thread(k.close)
