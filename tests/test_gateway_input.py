"""Bad input at the gateway, from any client (raw gRPC, not our well-behaved client): the right
status code and detail, and nothing written. Plus TLS: plain TCP refused, unauthenticated clients
refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from metashift import StoreUnavailable
from metashift.agent.config import ConfigError, build
from metashift.client import AgentClient, connect
from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc
from metashift_lab.servers import free_port
from tests.certs import Certificates, make_certificates
from tests.harness import Gateways, eventually, user_roots


@pytest.fixture
async def channel(agent: Any) -> Any:
    async with grpc.aio.insecure_channel(agent.address) as ch:
        yield ch


async def _fails(call: Any, code: grpc.StatusCode, kind: str | None = None) -> pb.Error | None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    assert err.value.code() == code, err.value.details()
    trailers = dict(err.value.trailing_metadata() or ())
    if kind is None:
        return None
    assert trailers[wire.ERROR_KIND_KEY] == kind
    detail = pb.Error.FromString(trailers[wire.ERROR_DETAIL_KEY])
    assert wire.kind_name(detail.kind) == kind
    return detail


INVALID = grpc.StatusCode.INVALID_ARGUMENT
BAD_PATHS = ["", "relative", "/trailing/", "/double//slash", "/dot/./x", "/dotdot/../x", "/nul\x00", "/ctl\x01"]


@pytest.mark.parametrize("path", BAD_PATHS)
async def test_invalid_paths_on_every_method(channel: Any, direct: Any, path: str) -> None:
    s = pb_grpc.MetadataStoreStub(channel)
    detail = await _fails(s.Put(pb.PutRequest(path=path, value=b"x")), INVALID, "InvalidPath")
    assert detail is not None and detail.path == path
    await _fails(s.Get(pb.GetRequest(path=path)), INVALID, "InvalidPath")
    await _fails(s.GetChildren(pb.GetChildrenRequest(path=path)), INVALID, "InvalidPath")
    await _fails(s.Exists(pb.ExistsRequest(path=path)), INVALID, "InvalidPath")
    await _fails(s.Delete(pb.DeleteRequest(path=path)), INVALID, "InvalidPath")
    await _fails(s.Batch(pb.BatchRequest(ops=[pb.Op(put=pb.PutRequest(path=path))])), INVALID, "InvalidPath")
    watch = s.Watch(pb.WatchRequest(path_prefix=path or "x"))
    await _fails(watch.read(), INVALID, "InvalidPath")
    assert await user_roots(direct) == []


async def test_root_cannot_be_written_or_deleted(channel: Any, direct: Any) -> None:
    s = pb_grpc.MetadataStoreStub(channel)
    await _fails(s.Put(pb.PutRequest(path="/", value=b"x")), INVALID, "InvalidPath")
    await _fails(s.Delete(pb.DeleteRequest(path="/")), INVALID, "InvalidPath")
    got = await direct.get("/")
    assert got is None or got[0] == b""


async def test_oversize_values(channel: Any, direct: Any, agent: Any) -> None:
    s = pb_grpc.MetadataStoreStub(channel)
    limit = agent.router.active.max_value_size
    detail = await _fails(s.Put(pb.PutRequest(path="/big", value=b"x" * (limit + 1))), INVALID, "ValueTooLarge")
    assert detail is not None and detail.size == limit + 1 and detail.limit == limit and detail.path == "/big"
    batch = pb.BatchRequest(ops=[pb.Op(put=pb.PutRequest(path="/ok", value=b"1")),
                                 pb.Op(put=pb.PutRequest(path="/big", value=b"x" * (limit + 1)))])
    await _fails(s.Batch(batch), INVALID, "ValueTooLarge")
    # over gRPC's own message limit: refused by the transport
    huge = pb.PutRequest(path="/huge", value=b"x" * (17 * 1024 * 1024))
    await _fails(s.Put(huge), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert not await direct.exists("/big") and not await direct.exists("/ok") and not await direct.exists("/huge")


@pytest.mark.parametrize(
    "raw",
    [b"\x0a\xff\xff\xff", b"\x0a\x02\xff\xfe", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"],
    ids=["truncated", "not-utf8-path", "garbage"],
)
async def test_undecodable_requests(channel: Any, direct: Any, raw: bytes) -> None:
    for method in ("Put", "Get", "Delete", "Batch"):
        call = channel.unary_unary(f"/metashift.v1.MetadataStore/{method}")(raw)
        await _fails(call, INVALID, "InvalidArgument")
    assert await user_roots(direct) == []


async def test_malformed_requests(channel: Any, direct: Any) -> None:
    s = pb_grpc.MetadataStoreStub(channel)
    await _fails(s.Put(pb.PutRequest(path="/v", value=b"x", expected_version=-2)), INVALID, "InvalidArgument")
    await _fails(s.Delete(pb.DeleteRequest(path="/v", expected_version=-1)), INVALID, "InvalidArgument")
    await _fails(s.Batch(pb.BatchRequest(ops=[pb.Op(put=pb.PutRequest(path="/b1")), pb.Op()])), INVALID,
                 "InvalidArgument")
    # an ephemeral without a session: no lifetime to follow
    await _fails(s.Put(pb.PutRequest(path="/e", ephemeral=True)), grpc.StatusCode.FAILED_PRECONDITION, "NoSession")
    await _fails(
        s.Put(pb.PutRequest(path="/e", ephemeral=True), metadata=((wire.SESSION_KEY, "no-such-session"),)),
        grpc.StatusCode.FAILED_PRECONDITION, "NoSession",
    )
    await _fails(s.Batch(pb.BatchRequest(ops=[pb.Op(put=pb.PutRequest(path="/e", ephemeral=True))])),
                 grpc.StatusCode.FAILED_PRECONDITION, "NoSession")
    # a session must start with Hello
    session = pb_grpc.SessionStub(channel).Open()
    await session.write(pb.SessionRequest(keep_alive=pb.KeepAlive(seq=1)))
    await _fails(session.read(), INVALID, "InvalidArgument")
    # an unknown method
    await _fails(channel.unary_unary("/metashift.v1.MetadataStore/Drop")(b""), grpc.StatusCode.UNIMPLEMENTED)
    assert await user_roots(direct) == []


async def test_typed_errors_through_the_client(agent: Any, open_stores: Callable[..., Any]) -> None:
    from metashift import AlreadyExists, BadVersion, NotEmpty, NotFound

    client: AgentClient = await open_stores(agent.address)
    await client.put("/t", b"1", expected_version=-1)
    with pytest.raises(AlreadyExists):
        await client.put("/t", b"1", expected_version=-1)
    with pytest.raises(BadVersion) as bv:
        await client.put("/t", b"1", expected_version=5)
    assert type(bv.value) is BadVersion and bv.value.path == "/t"
    with pytest.raises(NotFound):
        await client.delete("/nope")
    await client.put("/t/child", b"")
    with pytest.raises(NotEmpty):  # ZooKeeper behind the agent
        await client.delete("/t")


# ---- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("gateway-certs"))


def test_plain_tcp_is_refused_unless_allowed(zk_url: str) -> None:
    with pytest.raises(ConfigError) as err:
        build({"source.url": zk_url, "listen": f"tcp://127.0.0.1:{free_port()}"})
    assert err.value.key == "listen"
    build({"source.url": zk_url, "listen": f"tcp://127.0.0.1:{free_port()}", "tls.allow_insecure_tcp": True})


async def test_mutual_tls(gateways: Gateways, zk_url: str, direct: Any, certs: Certificates,
                          open_stores: Callable[..., Any]) -> None:
    agent = await gateways.start(zk_url, {
        "listen": f"tcp://127.0.0.1:{free_port()}", "tls.cert": str(certs.server_cert),
        "tls.key": str(certs.server_key), "tls.client_ca": str(certs.ca),
    })
    good: AgentClient = await open_stores(agent.address, ca=certs.ca, cert=certs.client_cert, key=certs.client_key)
    await good.put("/tls-ok", b"x", expected_version=-1)
    assert await direct.exists("/tls-ok")

    # no client certificate: the handshake fails, the call never reaches the gateway
    with pytest.raises(StoreUnavailable):
        await open_stores(agent.address, ca=certs.ca, timeout=3)
    creds = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
    async with grpc.aio.secure_channel(agent.address, creds) as ch:
        await _fails(pb_grpc.MetadataStoreStub(ch).Put(pb.PutRequest(path="/tls-anon", value=b"x"), timeout=3),
                     grpc.StatusCode.UNAVAILABLE)
    # plain text to a TLS port
    async with grpc.aio.insecure_channel(agent.address) as ch:
        await _fails(pb_grpc.MetadataStoreStub(ch).Put(pb.PutRequest(path="/tls-plain", value=b"x"), timeout=3),
                     grpc.StatusCode.UNAVAILABLE)
    # a server we do not trust (wrong CA) is refused by the client
    with pytest.raises(StoreUnavailable):
        await open_stores(agent.address, ca=certs.other_ca, cert=certs.client_cert, key=certs.client_key, timeout=3)
    assert not await direct.exists("/tls-anon") and not await direct.exists("/tls-plain")


async def test_server_only_tls(gateways: Gateways, zk_url: str, certs: Certificates,
                               open_stores: Callable[..., Any]) -> None:
    agent = await gateways.start(zk_url, {
        "listen": f"tcp://127.0.0.1:{free_port()}", "tls.cert": str(certs.server_cert),
        "tls.key": str(certs.server_key),
    })
    client: AgentClient = await open_stores(agent.address, ca=certs.ca)
    await client.put("/tls", b"x")
    got = await client.get("/tls")
    assert got is not None and got[0] == b"x"


async def test_bearer_token_is_required_when_configured(
    gateways: Gateways, zk_url: str, direct: Any, certs: Certificates, tmp_path: Any,
    open_stores: Callable[..., Any],
) -> None:
    """With auth.token_file, callers without the token get UNAUTHENTICATED on every method and
    write nothing; health checks stay open; TCP with server-only TLS is then authenticated."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from metashift import AuthFailed

    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    agent = await gateways.start(zk_url, {
        "listen": f"tcp://127.0.0.1:{free_port()}", "tls.cert": str(certs.server_cert),
        "tls.key": str(certs.server_key), "auth.token_file": str(token),
    })
    good: AgentClient = await open_stores(agent.address, ca=certs.ca, token="s3cret-token")
    await good.put("/token-ok", b"x", expected_version=-1, ephemeral=True)
    assert await direct.exists("/token-ok")
    # many times: a refusal racing the client's first write once surfaced as INTERNAL
    for wrong in (None, "wrong-token") * 25:
        with pytest.raises(AuthFailed):
            await open_stores(agent.address, ca=certs.ca, token=wrong, timeout=3)
    creds = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
    async with grpc.aio.secure_channel(agent.address, creds) as ch:
        store = pb_grpc.MetadataStoreStub(ch)
        await _fails(store.Put(pb.PutRequest(path="/token-anon", value=b"x"), timeout=3),
                     grpc.StatusCode.UNAUTHENTICATED)
        await _fails(store.Put(pb.PutRequest(path="/token-anon", value=b"x"), timeout=3,
                               metadata=(("authorization", "Bearer wrong"),)), grpc.StatusCode.UNAUTHENTICATED)
        await _fails(store.Get(pb.GetRequest(path="/token-ok"), timeout=3), grpc.StatusCode.UNAUTHENTICATED)
        watch = store.Watch(pb.WatchRequest(path_prefix="/"), timeout=3)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in watch:
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=3)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert not await direct.exists("/token-anon")


def test_empty_token_file_is_a_config_error(zk_url: str, tmp_path: Any) -> None:
    token = tmp_path / "token"
    token.write_text("  \n")
    with pytest.raises(ConfigError) as err:
        build({"source.url": zk_url, "auth.token_file": str(token)})
    assert err.value.key == "auth.token_file"


async def test_an_unexpected_failure_is_internal_counted_and_logged(
    channel: Any, agent: Any, direct: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug below the gateway (here: the store raising something no store should) reaches the
    client as INTERNAL with the Internal detail, is counted, and is logged with its traceback; the
    agent goes on serving."""
    await direct.put("/ok", b"v")
    store = agent.router.active

    async def broken(path: str) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(store, "_get", broken)
    s = pb_grpc.MetadataStoreStub(channel)
    detail = await _fails(s.Get(pb.GetRequest(path="/ok")), grpc.StatusCode.INTERNAL, "Internal")
    assert detail is not None and "RuntimeError: boom" in detail.message
    assert agent.metrics.requests.labels("Get", "INTERNAL")._value.get() == 1
    assert any("Get failed unexpectedly" in r.getMessage() and r.exc_info for r in caplog.records)
    monkeypatch.undo()
    assert (await s.Get(pb.GetRequest(path="/ok"))).value == b"v"


async def test_streaming_calls_are_counted_by_how_they_ended(channel: Any, agent: Any) -> None:
    """Watch and Session streams show in the request counter once they end, with their status."""
    requests = agent.metrics.requests
    s = pb_grpc.MetadataStoreStub(channel)
    await _fails(s.Watch(pb.WatchRequest(path_prefix="relative")).read(), INVALID, "InvalidPath")
    assert requests.labels("Watch", "INVALID_ARGUMENT")._value.get() == 1

    session = pb_grpc.SessionStub(channel).Open()
    await session.write(pb.SessionRequest(keep_alive=pb.KeepAlive(seq=1)))  # not a Hello
    await _fails(session.read(), INVALID, "InvalidArgument")
    assert requests.labels("Session", "INVALID_ARGUMENT")._value.get() == 1

    async with connect(agent.address) as client:
        await client.exists("/")
    # the agent counts the session once it has seen the stream end
    await eventually(lambda: requests.labels("Session", "OK")._value.get() == 1)
