"""The store contract when servers fail, on every backend directly and through the agent's gateway:
a server stopped and restarted, a server that never answers, a URL listing a dead server."""

from __future__ import annotations

from typing import Any

import pytest

import metashift
from metashift import StoreUnavailable
from tests.harness import BACKENDS, GATEWAY, GATEWAY_BACKENDS, retry_while_unavailable, store_kind


@pytest.mark.parametrize("backend", BACKENDS + GATEWAY_BACKENDS)
async def test_server_stopped_and_restarted(backend: str, fresh_servers: Any, open_backend: Any) -> None:
    # through the gateway, the agent's store call times out after 2 s and the client gets
    # UNAVAILABLE, which it raises as StoreUnavailable: the same contract end to end
    server = fresh_servers.of(backend)
    store = await open_backend(server.url + "/fault?timeout=2&session_timeout=30")
    try:
        await store.put("/survives", b"before", expected_version=-1)
        server.stop()
        with pytest.raises(StoreUnavailable):
            await store.get("/survives")
        with pytest.raises(StoreUnavailable):
            await store.put("/during", b"x")
        server.start()
        got = await retry_while_unavailable(lambda: store.get("/survives"), attempts=60, delay=0.5)
        assert got is not None and got[0] == b"before"
        stat = await store.put("/survives", b"after", expected_version=0)
        assert stat.version == 1
    finally:
        await store.close()


@pytest.mark.parametrize("backend", BACKENDS + GATEWAY_BACKENDS)
async def test_unreachable_server_is_store_unavailable(backend: str) -> None:
    from metashift_lab.servers import free_port

    if backend.startswith(GATEWAY):  # no agent listening: the client cannot open its session
        from metashift.client import connect

        with pytest.raises(StoreUnavailable):
            await connect(f"unix:/tmp/metashift-no-agent-{free_port()}.sock", timeout=2)
        with pytest.raises(StoreUnavailable):
            await connect(f"127.0.0.1:{free_port()}", timeout=2)
        return
    with pytest.raises(StoreUnavailable):
        await metashift.open_store(f"{backend}://127.0.0.1:{free_port()}?timeout=2")


@pytest.mark.parametrize("backend", BACKENDS + GATEWAY_BACKENDS)
async def test_several_hosts_with_one_down(backend: str, request: pytest.FixtureRequest, open_backend: Any) -> None:
    """A URL lists several servers; a dead one is skipped (through the gateway: the agent's URL)."""
    from metashift_lab.servers import free_port

    store_url = str(request.getfixturevalue(f"{store_kind(backend)}_url"))
    scheme, rest = store_url.split("://", 1)
    url = f"{scheme}://127.0.0.1:{free_port()},{rest}"
    store = await open_backend(url)
    await store.put("/multi-host", b"ok", expected_version=-1)
    got = await store.get("/multi-host")
    assert got is not None and got[0] == b"ok"
