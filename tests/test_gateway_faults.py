"""The agent's answers under store faults say whether the write happened (issue 8): a store that
stops answering a write it had gives "outcome unknown", never a retry-safe code; a write the agent
answered as "not written" is never applied afterwards; no background task's failure goes
unobserved. Real ZooKeeper and etcd, stopped with SIGSTOP."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from metashift.client import AgentClient, HeldForMigration, WriteOutcomeUnknown
from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc
from metashift.stores import MetadataStore, StoreUnavailable
from tests.harness import Gateways, eventually, stop_process_group, thread_states, user_roots


@contextlib.contextmanager
def frozen(server: Any) -> Iterator[None]:
    """The server stopped with SIGSTOP (connections stay open, nothing answers), every one of its
    threads seen stopped before the body runs (``stop_process_group``), then resumed."""
    pid = server.process.pid
    try:
        stop_process_group(pid)
        yield
    finally:
        os.killpg(pid, signal.SIGCONT)


def _catch_loop_errors(seen: list[dict[str, Any]]) -> None:
    loop = asyncio.get_running_loop()
    default = loop.get_exception_handler()

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        seen.append(context)
        if default is not None:
            default(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)


async def _raw_put(address: str, path: str, deadline: float, sequential: bool = False) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.MetadataStoreStub(channel)
        try:
            response = await stub.Put(pb.PutRequest(path=path, value=b"x", sequential=sequential), timeout=deadline)
        except grpc.aio.AioRpcError as err:
            return err
        pytest.fail(f"a put to {path} was acknowledged while the store was stopped: {response}")


def _trailers(err: grpc.aio.AioRpcError) -> dict[str, Any]:
    return dict(err.trailing_metadata() or ())


@pytest.mark.parametrize("kind", ["zk", "etcd"])
async def test_write_the_store_stops_answering_is_outcome_unknown_not_unavailable(
    kind: str, gateways: Gateways, fresh_servers: Any, open_stores: Callable[..., Any], caplog: Any
) -> None:
    """The store has the write and stops answering; the agent's own store timeout (5 s) comes
    first. The answer must not be UNAVAILABLE (retry-safe to most callers): UNKNOWN with the
    WriteOutcomeUnknown detail, outcome "unknown"; and the Python client says so."""
    server = fresh_servers.of(kind)
    agent = await gateways.start(server.url + "/faults?timeout=5&session_timeout=60")
    client: AgentClient = await open_stores(agent.address, timeout=20)
    await client.put("/seq", b"", expected_version=-1)
    with frozen(server):
        err = await _raw_put(agent.address, "/seq/id-", deadline=20, sequential=True)
        assert err.code() == grpc.StatusCode.UNKNOWN
        trailers = _trailers(err)
        assert trailers[wire.ERROR_KIND_KEY] == "WriteOutcomeUnknown"
        assert trailers[wire.OUTCOME_KEY] == "unknown"
        detail = pb.Error.FromString(trailers[wire.ERROR_DETAIL_KEY])
        assert detail.kind == pb.WRITE_OUTCOME_UNKNOWN and not detail.nothing_written

        with pytest.raises(WriteOutcomeUnknown) as typed:
            await client.put("/seq/id-", b"y", sequential=True, timeout=20)
        assert typed.value.write_may_have_happened
        assert isinstance(typed.value, StoreUnavailable)  # old `except StoreUnavailable` still catches it

        # a read that fails wrote nothing, and says so
        with pytest.raises(StoreUnavailable) as read:
            await client.get("/seq", timeout=20)
        assert not read.value.write_may_have_happened
    await agent.gate.close(30)  # every write handed to the store has ended


@pytest.mark.parametrize("kind", ["zk", "etcd"])
async def test_write_whose_caller_gave_up_is_unknown_and_its_failure_is_observed(
    kind: str, gateways: Gateways, fresh_servers: Any, open_stores: Callable[..., Any], caplog: Any
) -> None:
    """The caller's deadline (1 s) passes while the store holds the write; the write goes on in the
    agent and fails at the store's timeout (10 s: the caller must have gone away first even when
    this process's event loop stalls seconds on a loaded machine). The caller learns "outcome
    unknown"; the failure is logged, never left as "Task exception was never retrieved"."""
    seen: list[dict[str, Any]] = []
    _catch_loop_errors(seen)
    server = fresh_servers.of(kind)
    agent = await gateways.start(server.url + "/faults?timeout=10&session_timeout=60")
    client: AgentClient = await open_stores(agent.address, timeout=20)
    caplog.set_level(logging.WARNING, logger="metashift.agent.core.gate")
    with frozen(server):
        try:
            acked = await client.put("/given-up", b"x", timeout=1)
        except StoreUnavailable as err:
            failure = err
        else:
            pytest.fail(f"a put was acknowledged while the store was stopped ({acked}); its threads: "
                        f"{thread_states(server.process.pid)}")
        assert isinstance(failure, WriteOutcomeUnknown)
        assert failure.write_may_have_happened
        await eventually(lambda: agent.gate.in_flight == 0, within=30, what="the write failed in the agent")
    gc.collect()
    await asyncio.sleep(0)
    assert not [c for c in seen if "never retrieved" in str(c.get("message", ""))]
    assert any("a write whose caller went away ended with" in r.getMessage() for r in caplog.records)


async def test_held_write_that_expired_is_never_applied(
    gateways: Gateways, fresh_servers: Any, open_stores: Callable[..., Any]
) -> None:
    """A write held by the closed gate past its caller's deadline is answered "not written" (also on
    the wire) and is never applied, not when the gate opens, not when the store comes back."""
    server = fresh_servers.zk()
    agent = await gateways.start(server.url + "/faults?timeout=2&session_timeout=60")
    client: AgentClient = await open_stores(agent.address, timeout=20)
    direct: MetadataStore = await open_stores(server.url + "/faults")
    await agent.gate.close(5)
    with frozen(server):
        with pytest.raises(HeldForMigration) as err:
            await client.put("/held", b"x", timeout=1)
        assert not err.value.write_may_have_happened
        raw = await _raw_put(agent.address, "/held-raw", deadline=1)
        assert raw.code() == grpc.StatusCode.UNAVAILABLE
        assert _trailers(raw)[wire.OUTCOME_KEY] == "not-written"
        assert agent.gate.held == 0
    assert await agent.gate.open() == 0
    await client.put("/after", b"y", expected_version=-1)  # a write that follows, through the agent
    assert await direct.get("/held") is None
    assert await direct.get("/held-raw") is None
    assert agent.gate.expired_total == 2


async def test_ephemeral_that_survived_a_zookeeper_outage_ends_with_its_client_session(
    gateways: Gateways, fresh_servers: Any, open_stores: Callable[..., Any]
) -> None:
    """ZooKeeper killed long enough for the agent to declare its session lost, then restarted on
    the same data: the session survived, and so did the client's ephemeral. The agent must still
    know it is the client's (created_by_self once the client hears SessionReestablished) and delete
    it when the client closes its session."""
    from metashift import SessionEvent

    server = fresh_servers.zk()
    agent = await gateways.start(server.url + "/outage?session_timeout=90&timeout=5")
    client: AgentClient = await open_stores(agent.address, timeout=20)
    events: list[SessionEvent] = []
    client.add_session_listener(events.append)
    await client.put("/brokers/b1", b"owner", ephemeral=True)
    server.kill()
    # (a ZooKeeper restarted on a loaded machine must still find the session alive: 90 s; at load 40
    # a JVM start and the agent's reconnection took longer than 30)
    await eventually(lambda: SessionEvent.SESSION_LOST in events, within=90, what="SessionLost reaches the client")
    server.start()  # same data dir: the agent's ZooKeeper session is still there, with its ephemeral
    await eventually(lambda: SessionEvent.SESSION_REESTABLISHED in events or SessionEvent.RECONNECTED
                     in events[events.index(SessionEvent.SESSION_LOST):], within=60,
                     what="the client hears the store is back")
    got = await client.get("/brokers/b1")
    assert got is not None and got[0] == b"owner"
    assert got[1].ephemeral and got[1].created_by_self  # the client is told its ephemeral survived
    assert agent.registry.ephemeral_count == 1
    await client.close()
    direct: MetadataStore = await open_stores(server.url + "/outage")
    assert await direct.get("/brokers/b1") is None  # gone with the client's session


def _trailer_bytes(err: grpc.aio.AioRpcError) -> int:
    """What the error's status and trailers weigh on the wire (binary values in base64)."""
    total = len((err.details() or "").encode())
    for key, value in err.trailing_metadata() or ():
        total += len(key) + (len(value) * 4 // 3 + 4 if isinstance(value, bytes) else len(value.encode()))
    return total


@pytest.mark.parametrize("length", [2_000, 6_000, 100_000])
async def test_errors_fit_in_any_grpc_client_whatever_the_path(
    length: int, agent: Any, direct: Any, open_stores: Callable[..., Any]
) -> None:
    """Raw gRPC calls with long paths: the answer keeps its kind, its trailers stay well under
    8 KiB (the path carried once), and a path over the documented limit is InvalidPath."""
    path = "/" + "p" * (length - 1)
    async with grpc.aio.insecure_channel(agent.address) as channel:
        stub = pb_grpc.MetadataStoreStub(channel)
        calls = [
            stub.Put(pb.PutRequest(path=path, value=b"x", expected_version=3)),
            stub.Delete(pb.DeleteRequest(path=path)),
            stub.Get(pb.GetRequest(path=path)),
        ]
        for call in calls:
            if length <= wire.MAX_PATH_BYTES and call is calls[2]:
                assert not (await call).found
                continue
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            size = _trailer_bytes(err.value)
            assert size < 4 * 1024, size
            trailers = _trailers(err.value)
            detail = pb.Error.FromString(trailers[wire.ERROR_DETAIL_KEY])
            if length <= wire.MAX_PATH_BYTES:
                assert trailers[wire.ERROR_KIND_KEY] in ("BadVersion", "NotFound")
                assert detail.path == path  # whole, once
            else:
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert trailers[wire.ERROR_KIND_KEY] == "InvalidPath"
                assert trailers[wire.OUTCOME_KEY] == "not-written"
                assert "over the limit of 2048" in detail.message
    assert await user_roots(direct) == []


async def test_multibyte_path_at_the_limit_and_client_refuses_longer_ones_unsent(
    agent: Any, direct: Any, open_stores: Callable[..., Any]
) -> None:
    from metashift import AlreadyExists, InvalidPath

    client: AgentClient = await open_stores(agent.address)
    at_limit = "/" + "\u00e9" * ((wire.MAX_PATH_BYTES - 1) // 2)  # 2047 bytes of UTF-8
    stat = await client.put(at_limit, b"v", expected_version=-1)
    assert stat.version == 0
    with pytest.raises(AlreadyExists) as exists:  # the error of a path at the limit names it whole
        await client.put(at_limit, b"w", expected_version=-1)
    assert exists.value.path == at_limit and not exists.value.write_may_have_happened
    too_long = at_limit + "\u00e9"
    sent = agent.metrics.requests.labels("Put", "INVALID_ARGUMENT")._value.get()
    for call in (client.put(too_long, b"x"), client.get(too_long), client.delete(too_long)):
        with pytest.raises(InvalidPath) as err:
            await call
        assert not err.value.write_may_have_happened
    assert agent.metrics.requests.labels("Put", "INVALID_ARGUMENT")._value.get() == sent  # never sent
    got = await direct.get(at_limit)
    assert got is not None and got[0] == b"v"
