"""Client sessions through the agent: ephemerals live exactly as long as their session, session
events reach clients, and clients re-attach after an agent restart."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from metashift import SessionEvent, StoreUnavailable
from metashift.client import AgentClient
from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc
from tests.gateway_support import SlowStore, raw_session
from tests.harness import Gateways, eventually


async def test_many_sessions_each_ephemeral_lives_as_long_as_its_own_session(
    agent: Any, direct: Any, open_stores: Callable[..., Any]
) -> None:
    n = 40
    clients: list[AgentClient] = list(await asyncio.gather(*(open_stores(agent.address) for _ in range(n))))
    assert len({c.session_id for c in clients}) == n
    await direct.put("/live", b"", expected_version=-1)
    await asyncio.gather(
        *(c.put(f"/live/c{i}-{j}", f"{i}".encode(), ephemeral=True) for i, c in enumerate(clients) for j in range(3))
    )
    seq = await asyncio.gather(*(c.put("/live/s-", b"", ephemeral=True, sequential=True) for c in clients))
    assert len(await direct.get_children("/live")) == 4 * n
    assert agent.metrics.registry.get_sample_value("metashift_agent_ephemerals") == 4 * n
    # ownership is per client session, not per agent
    own = await clients[1].get("/live/c1-0")
    other = await clients[2].get("/live/c1-0")
    assert own is not None and own[1].created_by_self and other is not None and not other[1].created_by_self

    # close the even ones: exactly their ephemerals go, at once
    await asyncio.gather(*(c.close() for c in clients[::2]))
    left = set(await direct.get_children("/live"))
    expected = {f"c{i}-{j}" for i in range(1, n, 2) for j in range(3)} | {
        s.path.rsplit("/", 1)[1] for s in seq[1::2]
    }
    assert left == expected
    assert agent.metrics.registry.get_sample_value("metashift_agent_ephemerals") == len(expected)
    assert await direct.exists("/live")  # persistent nodes stay
    # the odd ones' sessions are untouched: they can still update their ephemerals
    await clients[1].put("/live/c1-0", b"still mine", expected_version=0)


async def test_broken_stream_ends_the_session_and_the_client_reattaches(
    agent: Any, direct: Any, open_stores: Callable[..., Any]
) -> None:
    client: AgentClient = await open_stores(agent.address)
    events: list[SessionEvent] = []
    client.add_session_listener(events.append)
    first_session = client.session_id
    await client.put("/mine", b"x", ephemeral=True)
    client._session._call.cancel()  # the stream breaks without a goodbye (like a dead connection)

    async def gone() -> bool:
        return not await direct.exists("/mine")

    await eventually(gone, what="ephemeral of the broken session deleted")

    async def reattached() -> bool:
        return SessionEvent.SESSION_REESTABLISHED in events

    await eventually(reattached, what="client re-attached")
    assert events[:3] == [SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED]
    assert client.session_id != first_session
    await client.put("/mine", b"again", ephemeral=True)
    got = await client.get("/mine")
    assert got is not None and got[1].created_by_self


_KILLED_CLIENT = """
import asyncio, sys
import metashift.client

async def main():
    c = await metashift.client.connect(sys.argv[1])
    for i in range(5):
        await c.put(f"/victim/e{i}", b"x", ephemeral=True)
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_ephemerals_vanish_when_the_client_process_is_killed(agent: Any, direct: Any) -> None:
    await direct.put("/victim", b"", expected_version=-1)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_CLIENT, agent.address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "false"},
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.strip() == b"ready", (await proc.stderr.read()).decode()
        assert len(await direct.get_children("/victim")) == 5
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 10)

        async def gone() -> bool:
            return await direct.get_children("/victim") == []

        await eventually(gone, what="ephemerals of the killed client deleted")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_agent_restart_client_reattaches_with_session_events(
    gateways: Gateways, zk_url: str, direct: Any, open_stores: Callable[..., Any]
) -> None:
    first = await gateways.start(zk_url)
    client: AgentClient = await open_stores(first.address, timeout=5)
    events: list[SessionEvent] = []
    client.add_session_listener(events.append)
    await client.put("/before-restart", b"x", ephemeral=True)
    await client.put("/persistent", b"p", expected_version=-1)

    await first.stop(grace=1.0)  # drains, ends sessions, closes its store: the ephemeral goes
    assert not await direct.exists("/before-restart")

    async def lost() -> bool:
        return SessionEvent.CONNECTION_LOST in events

    await eventually(lost, what="ConnectionLost")
    with pytest.raises(StoreUnavailable):
        await client.get("/persistent")  # no agent: a typed error, fast

    await gateways.start(zk_url, {"listen": first.address})  # same socket, new agent

    async def back() -> bool:
        return SessionEvent.SESSION_REESTABLISHED in events

    await eventually(back, what="SessionReestablished after the agent came back")
    assert events == [SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED]
    got = await client.get("/persistent")
    assert got is not None and got[0] == b"p"
    stat = await client.put("/after-restart", b"y", ephemeral=True)
    assert stat.ephemeral and stat.created_by_self


async def test_store_session_events_reach_clients(
    gateways: Gateways, fresh_servers: Any, open_stores: Callable[..., Any]
) -> None:
    server = fresh_servers.zk()
    agent = await gateways.start(server.url + "/events?timeout=5&session_timeout=90")
    clients: list[AgentClient] = [await open_stores(agent.address, timeout=5) for _ in range(3)]
    seen: list[list[SessionEvent]] = [[] for _ in clients]
    for client, events in zip(clients, seen, strict=True):
        client.add_session_listener(events.append)
    server.stop()

    async def all_lost() -> bool:
        return all(SessionEvent.CONNECTION_LOST in events for events in seen)

    await eventually(all_lost, within=20, what="ConnectionLost of the agent's store forwarded to every client")
    server.start()

    async def all_back() -> bool:
        return all(SessionEvent.RECONNECTED in events for events in seen)

    await eventually(all_back, within=30, what="Reconnected forwarded to every client")
    for events in seen:
        assert SessionEvent.SESSION_LOST not in events  # the store session survived the short outage


async def test_keepalive_timeout_ends_the_session(agent: Any, direct: Any) -> None:
    """A client that stops sending keep-alives (hung, not dead) loses its session and ephemerals."""
    async with grpc.aio.insecure_channel(agent.address) as channel:
        call, started, md = await raw_session(channel, pb.Hello(timeout_ms=700, client_name="silent"))
        assert started.WhichOneof("kind") == "started" and started.started.timeout_ms == 700
        put = pb_grpc.MetadataStoreStub(channel).Put
        await put(pb.PutRequest(path="/silent", value=b"x", ephemeral=True), metadata=md)
        assert await direct.exists("/silent")
        response = await asyncio.wait_for(call.read(), 30)
        assert response.WhichOneof("kind") == "event" and response.event.type == pb.SESSION_LOST
        assert not await direct.exists("/silent")
        # the dead session can create no more ephemerals
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await put(pb.PutRequest(path="/silent", value=b"x", ephemeral=True), metadata=md)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert dict(err.value.trailing_metadata())[wire.ERROR_KIND_KEY] == "NoSession"
        assert not await direct.exists("/silent")


async def test_recreate_ephemerals_in_another_store(
    agent: Any, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    """The agent knows each session's ephemerals (latest values) and can make them in a target."""
    a: AgentClient = await open_stores(agent.address)
    b: AgentClient = await open_stores(agent.address)
    await a.put("/brokers", b"", expected_version=-1)
    await a.put("/brokers/a", b"a0", ephemeral=True)
    await a.put("/brokers/a", b"a1")  # later values of the same ephemeral
    await a.put("/brokers/a", b"a2", expected_version=1)
    seq = await b.put("/brokers/b-", b"b", ephemeral=True, sequential=True)
    await b.put("/brokers/persistent", b"p")
    target = await open_stores(etcd_url)
    assert agent.registry.ephemerals() == {"/brokers/a": b"a2", seq.path: b"b"}
    assert await agent.registry.recreate_in(target) == 2
    got = await target.get("/brokers/a")
    # the same version too: a broker's compare-and-set on its own ephemeral (Pulsar's ResourceLock)
    # made with the version it read before the switch must still work after it
    assert got is not None and got[0] == b"a2" and got[1].ephemeral and got[1].version == 2
    assert (await target.put("/brokers/a", b"a3", expected_version=2, ephemeral=True)).version == 3
    got = await target.get(seq.path)
    assert got is not None and got[0] == b"b" and got[1].ephemeral and got[1].version == 0
    assert not await target.exists("/brokers/persistent")  # persistent nodes are the copy's business


async def test_ephemeral_put_whose_caller_gave_up_is_still_tracked_and_deleted_with_the_session(
    gateways: Gateways, direct: Any, zk_url: str, open_stores: Callable[..., Any]
) -> None:
    """The store applied an ephemeral put but its answer came after the client's deadline: the
    client gets StoreUnavailable (outcome unknown), and the agent must still know the ephemeral,
    so that it goes when the client's session ends rather than living on with the agent."""
    class _SlowAnswer(SlowStore):
        """Applies a put at once, answers ``delay`` seconds later (a slow network back)."""

        async def _put(
            self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
        ) -> Any:
            stat = await self.inner.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)
            await asyncio.sleep(self.delay)
            return stat

    agent = await gateways.start(zk_url, source=_SlowAnswer(direct, 1.0))
    client: AgentClient = await open_stores(agent.address)
    with pytest.raises(StoreUnavailable):
        await client.put("/late-eph", b"x", ephemeral=True, timeout=0.3)
    assert await direct.exists("/late-eph")  # applied: the outcome was only unknown to the client
    await client.close()

    async def gone() -> bool:
        return not await direct.exists("/late-eph")

    await eventually(gone, what="the ephemeral of the ended session deleted")


async def test_session_closed_then_stream_cancelled_still_deletes_every_ephemeral(
    gateways: Gateways, direct: Any, zk_url: str
) -> None:
    """A client sends CloseSession and goes away (cancels the stream) while the agent is still
    deleting its ephemerals: the deletion must go on to the last one."""
    class _SlowDelete(SlowStore):
        async def _put(
            self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
        ) -> Any:
            return await self.inner.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)

        async def _delete(self, path: str, expected_version: int | None) -> None:
            await asyncio.sleep(self.delay)
            await self.inner.delete(path, expected_version)

    agent = await gateways.start(zk_url, source=_SlowDelete(direct, 0.5))
    await direct.put("/going", b"", expected_version=-1)
    async with grpc.aio.insecure_channel(agent.address) as channel:
        call, _, md = await raw_session(channel, pb.Hello(client_name="leaver"))
        put = pb_grpc.MetadataStoreStub(channel).Put
        for i in range(4):
            await put(pb.PutRequest(path=f"/going/e{i}", value=b"x", ephemeral=True), metadata=md)
        await call.write(pb.SessionRequest(close=pb.CloseSession()))

        async def deleting() -> bool:
            return len(await direct.get_children("/going")) < 4

        await eventually(deleting, what="the agent started deleting")
        call.cancel()

    async def all_gone() -> bool:
        return await direct.get_children("/going") == []

    await eventually(all_gone, what="every ephemeral of the closed session deleted")


async def test_batch_of_ephemerals_in_flight_when_the_session_ends_leaves_none_behind(
    gateways: Gateways, direct: Any, zk_url: str
) -> None:
    """A batch of several ephemeral puts is in the store when its session ends: every one of them
    must go, not only the first."""
    agent = await gateways.start(zk_url, source=SlowStore(direct, 0.5))
    await direct.put("/bat", b"", expected_version=-1)
    async with grpc.aio.insecure_channel(agent.address) as channel:
        call, _, md = await raw_session(channel, pb.Hello(client_name="batcher"))
        ops = [pb.Op(put=pb.PutRequest(path=f"/bat/e{i}", value=b"x", ephemeral=True)) for i in range(3)]
        batch = pb_grpc.MetadataStoreStub(channel).Batch(pb.BatchRequest(ops=ops), metadata=md)
        await eventually(lambda: _true(agent.gate.in_flight == 1), what="the batch in the store")
        await call.write(pb.SessionRequest(close=pb.CloseSession()))
        closed = await call.read()
        assert closed.WhichOneof("kind") == "closed"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await batch
        assert dict(err.value.trailing_metadata())[wire.ERROR_KIND_KEY] == "NoSession"

    async def all_gone() -> bool:
        return await direct.get_children("/bat") == []

    await eventually(all_gone, what="every ephemeral of the batch deleted")
    assert agent.registry.ephemerals() == {}


async def _true(value: bool) -> bool:
    return value


async def test_recreate_skips_ephemerals_that_are_gone_or_no_longer_ephemeral(
    agent: Any, direct: Any, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    """Ephemerals deleted behind the agent's back (another agent, an operator), or replaced by a
    persistent node, are not re-created in the target: a ghost ephemeral there would be a node
    the source no longer has, and a persistent node turned ephemeral would vanish with the agent."""
    a: AgentClient = await open_stores(agent.address)
    b: AgentClient = await open_stores(agent.address)
    await a.put("/r", b"", expected_version=-1)
    await a.put("/r/a", b"a", ephemeral=True)
    await b.put("/r/b", b"b", ephemeral=True)
    await a.put("/r/c", b"c", ephemeral=True)
    await direct.delete("/r/b")
    await direct.delete("/r/c")
    await b.put("/r/b", b"persistent now")  # through the agent, no longer ephemeral
    got = await direct.get("/r/b")
    assert got is not None and not got[1].ephemeral
    target = await open_stores(etcd_url)
    await agent.gate.close()
    assert await agent.registry.recreate_in(target) == 1
    await agent.gate.open(towards=target)
    assert await target.get_children("/r") == ["a"]
    assert agent.registry.ephemerals() == {"/r/a": b"a"}


async def test_a_watcher_that_falls_behind_is_told_it_missed_notifications(
    agent: Any, direct: Any, open_stores: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Watch reader that falls WATCH_QUEUE_LIMIT notifications behind loses notifications: its
    stream ends with RESOURCE_EXHAUSTED (not a normal end it could take for a clean close), and
    the client reports it as ConnectionLost, then Reconnected once it watches again."""
    from metashift import Notification, NotificationType
    from metashift.agent.gateway import watches as watch_stream

    monkeypatch.setattr(watch_stream, "WATCH_QUEUE_LIMIT", 20)

    def burst(tag: str) -> None:
        # delivered by the agent's store in one go: no reader can drain a queue in between
        for i in range(50):
            agent.router.active._notify(Notification(NotificationType.CREATED, f"/burst-{tag}/{i}"))

    async with grpc.aio.insecure_channel(agent.address) as ch:
        call = pb_grpc.MetadataStoreStub(ch).Watch(pb.WatchRequest(path_prefix="/"))
        assert (await call.read()).WhichOneof("kind") == "ready"
        burst("raw")
        received = 0
        with pytest.raises(grpc.aio.AioRpcError) as err:
            while (await call.read()) is not grpc.aio.EOF:
                received += 1
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert received == 20

    client: AgentClient = await open_stores(agent.address)
    events: list[SessionEvent] = []
    seen: list[str] = []
    client.add_session_listener(events.append)
    client.add_listener(lambda n: seen.append(n.path))
    await client.exists("/")  # waits until the agent registered the watch
    burst("client")
    await eventually(lambda: _true(SessionEvent.RECONNECTED in events), what="Reconnected after the overflow")
    assert events[events.index(SessionEvent.RECONNECTED) - 1] == SessionEvent.CONNECTION_LOST
    await direct.put("/after-overflow", b"x", expected_version=-1)
    await eventually(lambda: _true("/after-overflow" in seen), what="notifications flow again")
