"""The gateway's Calls stream from a raw gRPC client (not the client library): many calls on one
stream, each answered under its own id with what the unary call answers; failures as Error
details; the stream's session metadata applies to its calls; a message that names no call ends
the stream with INVALID_ARGUMENT; and the client library, which sends its calls on it, makes unary
calls when told to and gives the same answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from metashift.client import AgentClient
from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc
from metashift.stores.errors import BadVersion
from tests.gateway_support import raw_session
from tests.harness import Gateways


@pytest.fixture
async def channel(agent: Any) -> Any:
    async with grpc.aio.insecure_channel(agent.address) as ch:
        yield ch


async def _exchange(call: Any, requests: list[pb.CallRequest]) -> dict[int, pb.CallResponse]:
    """Send every request at once, end the stream, and collect the answers by id."""
    for request in requests:
        await call.write(request)
    await call.done_writing()
    answers: dict[int, pb.CallResponse] = {}
    while (response := await call.read()) is not grpc.aio.EOF:
        assert response.id not in answers, response
        answers[response.id] = response
    assert await call.code() == grpc.StatusCode.OK
    return answers


async def test_calls_on_one_stream_are_answered_by_id_as_unary_calls_are(channel: Any, direct: Any) -> None:
    await direct.put("/calls", b"")
    value, stat = b"v" * 100, await direct.put("/calls/known", b"v" * 100)
    requests = [pb.CallRequest(id=1000 + i, put=pb.PutRequest(path=f"/calls/n{i}", value=b"%d" % i)) for i in range(40)]
    requests += [
        pb.CallRequest(id=1, get=pb.GetRequest(path="/calls/known")),
        pb.CallRequest(id=2, get=pb.GetRequest(path="/calls/missing")),
        pb.CallRequest(id=3, exists=pb.ExistsRequest(path="/calls/known")),
        pb.CallRequest(id=4, put=pb.PutRequest(path="/calls/known", value=b"w", expected_version=stat.version + 7)),
        pb.CallRequest(id=5, delete=pb.DeleteRequest(path="/calls/missing")),
        pb.CallRequest(id=6, put=pb.PutRequest(path="relative", value=b"x")),
        pb.CallRequest(id=7, batch=pb.BatchRequest(ops=[pb.Op(get=pb.GetRequest(path="/calls/known")),
                                                         pb.Op(put=pb.PutRequest(path="/calls/b", value=b"b"))])),
        pb.CallRequest(id=8, timeout_ms=5000, put=pb.PutRequest(path="/calls/seq-", value=b"s", sequential=True)),
    ]  # fmt: skip
    answers = await _exchange(pb_grpc.MetadataStoreStub(channel).Calls(), requests)
    assert set(answers) == {r.id for r in requests}
    for i in range(40):
        assert answers[1000 + i].WhichOneof("result") == "put", answers[1000 + i]
        assert await direct.get(f"/calls/n{i}") is not None
        assert (await direct.get(f"/calls/n{i}"))[0] == b"%d" % i
    known = answers[1].get
    assert known.found and known.value == value and known.stat.version == stat.version
    assert answers[2].WhichOneof("result") == "get" and not answers[2].get.found
    assert answers[3].exists.exists is True
    # failures: the Error detail the unary call's trailer carries, nothing written
    for call_id, kind in ((4, "BadVersion"), (5, "NotFound"), (6, "InvalidPath")):
        assert answers[call_id].WhichOneof("result") == "error", answers[call_id]
        assert wire.kind_name(answers[call_id].error.kind) == kind, answers[call_id]
        assert answers[call_id].error.nothing_written is True
    assert (await direct.get("/calls/known"))[0] == value
    batch = answers[7].batch.results
    assert batch[0].get.value == value and batch[1].WhichOneof("result") == "put"
    assert (await direct.get("/calls/b"))[0] == b"b"
    seq = answers[8].put.stat.path
    assert seq.startswith("/calls/seq-") and (await direct.get(seq))[0] == b"s"


async def test_the_streams_session_applies_to_its_calls(channel: Any, direct: Any, agent: Any) -> None:
    session_call, _started, metadata = await raw_session(channel, pb.Hello(timeout_ms=5000, client_name="calls"))
    stub = pb_grpc.MetadataStoreStub(channel)
    answers = await _exchange(
        stub.Calls(metadata=metadata),
        [pb.CallRequest(id=1, put=pb.PutRequest(path="/eph", value=b"e", ephemeral=True))],
    )
    assert answers[1].put.stat.ephemeral and answers[1].put.stat.created_by_self, answers[1]
    assert (await direct.get("/eph"))[0] == b"e"
    # without a session, an ephemeral is refused (NoSession), nothing written
    answers = await _exchange(
        stub.Calls(), [pb.CallRequest(id=9, put=pb.PutRequest(path="/eph2", value=b"e", ephemeral=True))]
    )
    assert wire.kind_name(answers[9].error.kind) == "NoSession" and answers[9].error.nothing_written
    assert await direct.get("/eph2") is None
    # the ephemeral made on the stream dies with the session
    await session_call.write(pb.SessionRequest(close=pb.CloseSession()))
    await session_call.done_writing()
    while await session_call.read() is not grpc.aio.EOF:
        pass
    assert await direct.get("/eph") is None


async def test_a_message_that_names_no_call_ends_the_stream(channel: Any, direct: Any) -> None:
    call = pb_grpc.MetadataStoreStub(channel).Calls()
    await call.write(pb.CallRequest(id=1, put=pb.PutRequest(path="/before", value=b"x")))
    assert (await call.read()).id == 1
    await call.write(pb.CallRequest(id=2))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert (await direct.get("/before"))[0] == b"x"


@pytest.mark.parametrize("streamed", [True, False], ids=["calls-stream", "unary"])
async def test_the_client_answers_the_same_on_the_stream_and_in_unary_calls(
    agent: Any, direct: Any, open_stores: Callable[..., Any], streamed: bool
) -> None:
    client: AgentClient = await open_stores(agent.address, streamed_calls=streamed)
    stat = await client.put("/same", b"1")
    assert (await client.get("/same")) == (b"1", stat)
    results = await asyncio.gather(*(client.put(f"/same-{i}", b"%d" % i) for i in range(20)))
    got = [await direct.get(f"/same-{i}") for i in range(20)]
    assert [(g[0], g[1].version) for g in got if g] == [(b"%d" % i, s.version) for i, s in enumerate(results)]
    with pytest.raises(BadVersion) as err:
        await client.put("/same", b"2", expected_version=stat.version + 3, timeout=5)
    assert err.value.write_may_have_happened is False
    assert (await direct.get("/same"))[0] == b"1"


async def test_the_client_makes_unary_calls_to_an_agent_without_the_calls_stream(
    gateways: Gateways, zk_url: str, direct: Any, open_stores: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent from before the Calls stream answers it UNIMPLEMENTED, as gRPC answers an unknown
    method: the client's calls go as unary calls instead, none lost or made twice."""
    from metashift.agent.gateway.calls import CallStreams

    async def unknown_method(self: CallStreams, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    monkeypatch.setattr(CallStreams, "serve", unknown_method)  # before the agent binds its handlers
    agent = await gateways.start(zk_url)
    client: AgentClient = await open_stores(agent.address)
    stats = await asyncio.gather(*(client.put(f"/old-{i}", b"%d" % i, expected_version=-1) for i in range(5)))
    assert [s.version for s in stats] == [0] * 5
    got = await client.get("/old-3")
    assert got is not None and got[0] == b"3" and got[1].version == stats[3].version
    assert client._calls is not None and client._calls.supported is False
    assert [(await direct.get(f"/old-{i}"))[0] for i in range(5)] == [b"%d" % i for i in range(5)]
