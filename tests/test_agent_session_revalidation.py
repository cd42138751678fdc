"""When the agent's own store session is lost and taken again, every client session whose
ephemeral went with it is expired, as its own store would have expired it: a ZooKeeper client
(kazoo, through the agent's ZooKeeper front) is told its session expired and registers again on
a new one, a gRPC client hears SESSION_LOST and gets a new session. Oxia is the store where this
shows: a lost session's records stay readable, under the agent's own client identity, until the
restarted server expires them, so they must not read as the agent's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from metashift import SessionEvent
from metashift.client import AgentClient
from metashift.stores import SessionHandle, open_store
from tests.harness import Gateways, eventually


async def test_a_record_of_a_session_the_store_no_longer_holds_is_not_its_own(oxia_url: str) -> None:
    """Same client identity, another session: an ephemeral reads as the store's own only while
    the store holds the session it lives on."""
    url = oxia_url + "/lost-session?session_timeout=10"
    first = await open_store(url)
    try:
        made = await first.put("/reg", b"first", ephemeral=True)
        assert made.created_by_self
        handle = first.session_handle()
        assert handle is not None and handle.identity
        # the identity without any of its sessions: what a store is after losing them
        second = await open_store(url, resume=SessionHandle("oxia", identity=handle.identity))
        try:
            assert not second.resumed
            got = await second.get("/reg")
            assert got is not None and got[0] == b"first" and got[1].ephemeral
            assert not got[1].created_by_self
            assert got[1].owner == made.owner  # the same identity reads as the same owner
            mine = await second.put("/mine", b"second", ephemeral=True)
            assert mine.created_by_self
            theirs = await first.get("/mine")
            assert theirs is not None and theirs[1].ephemeral and not theirs[1].created_by_self
        finally:
            await second.close()
    finally:
        await first.close()


async def test_clients_whose_ephemerals_went_with_the_store_session_are_expired(
    gateways: Gateways, fresh_servers: Any, open_stores: Callable[..., Any]
) -> None:
    server = fresh_servers.oxia()
    url = server.url + "/revalidate?timeout=2&session_timeout=2"
    agent = await gateways.start(url, {"zookeeper.listen": "127.0.0.1:0"})
    kazoo = KazooClient(hosts=agent.zookeeper.address, timeout=30)
    states: list[str] = []
    kazoo.add_listener(states.append)
    await asyncio.to_thread(kazoo.start, 15)
    grpc_client: AgentClient = await open_stores(agent.address, timeout=5)
    events: list[SessionEvent] = []
    grpc_client.add_session_listener(events.append)
    try:
        await asyncio.to_thread(kazoo.create, "/reg", b"")
        await asyncio.to_thread(kazoo.create, "/reg/bookie", b"k", ephemeral=True)
        await grpc_client.put("/reg/broker", b"g", ephemeral=True)
        first_session = grpc_client.session_id
        assert agent.registry.ephemeral_count == 2
        server.stop()
        # the agent's store session is lost (no heartbeat answered for its 2 s timeout)
        await eventually(lambda: SessionEvent.SESSION_LOST in events, within=60, what="SessionLost forwarded")
        server.start()
        await eventually(lambda: KazooState.LOST in states, within=60, what="kazoo told its session expired")
        await eventually(lambda: grpc_client.session_id not in ("", first_session), within=60,
                         what="the gRPC client on a new session")
        assert agent.registry.get(first_session) is None
        # each registers again, on its new session; the records are the agent's store session's
        await eventually(lambda: kazoo.state == KazooState.CONNECTED, within=60, what="kazoo on a new session")
        # the lost session's record stays until the restarted server expires it
        await eventually(lambda: _absent(agent, "/reg/bookie"), within=60, what="the lost registration gone")
        await asyncio.to_thread(kazoo.create, "/reg/bookie", b"k2", ephemeral=True)
        await grpc_client.put("/reg/broker", b"g2", ephemeral=True)
        for path, value in (("/reg/bookie", b"k2"), ("/reg/broker", b"g2")):
            got = await agent.gate.router.active.get(path)
            assert got is not None and got[0] == value and got[1].ephemeral and got[1].created_by_self, path
        assert agent.registry.ephemeral_count == 2
        stat = await asyncio.to_thread(kazoo.exists, "/reg/bookie")
        assert stat is not None and stat.ephemeralOwner == kazoo.client_id[0]
    finally:
        await asyncio.to_thread(kazoo.stop)
        await asyncio.to_thread(kazoo.close)


async def _absent(agent: Any, path: str) -> bool:
    return await agent.gate.router.active.get(path) is None
