"""A ZooKeeper client's write held by the agent's write gate waits, and its session lives on:
pings are answered while the write is held, longer than the session timeout."""

from __future__ import annotations

import asyncio
import threading

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

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
