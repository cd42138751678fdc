"""A store session handed to the next process (``session_handle``, ``detach``, ``open_store(resume=)``),
on every store kind: the successor gets the same session back, its ephemerals with their owner,
values and versions; a session that expired meanwhile is not given back (fail closed)."""

from __future__ import annotations

import asyncio

import pytest

from metashift.stores import SessionHandle, open_store
from tests.harness import BACKENDS, eventually, store_kind


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _with_timeout(url: str, seconds: float) -> str:
    return f"{url}{'&' if '?' in url else '?'}session_timeout={seconds:g}"


async def test_a_detached_session_is_resumed_with_its_ephemerals(backend: str, request: pytest.FixtureRequest) -> None:
    url = _with_timeout(str(request.getfixturevalue(f"{store_kind(backend)}_url")), 10)
    first = await open_store(url)
    try:
        await first.put("/reg", b"bookie-1", ephemeral=True)
        stat = await first.put("/reg", b"bookie-1 v2", expected_version=0, ephemeral=True)
        handle = first.session_handle()
        assert handle is not None and handle.kind == store_kind(backend)
        owner = (await first.get("/reg"))[1].owner  # type: ignore[index]
    finally:
        await first.detach()
    # the handle survives a trip through JSON (the agent's state file)
    handle = SessionHandle.from_json(handle.to_json())
    assert "secret" not in repr(handle) or handle.secret == b""
    second = await open_store(url, resume=handle)
    try:
        assert second.resumed
        got = await second.get("/reg")
        assert got is not None
        value, now = got
        assert value == b"bookie-1 v2"
        assert now.version == stat.version == 1
        assert now.ephemeral and now.created_by_self
        assert now.owner == owner
        # the successor's session is the one that holds it: a put on it keeps it ephemeral and ours
        after = await second.put("/reg", b"bookie-1 v3", expected_version=1, ephemeral=True)
        assert after.version == 2 and after.ephemeral
    finally:
        await second.close()
    # closing the successor ends the session: the ephemeral goes
    check = await open_store(url)
    try:
        await eventually(lambda: _absent(check, "/reg"), 15, "the ephemeral gone with the resumed session")
    finally:
        await check.close()


async def _absent(store: object, path: str) -> bool:
    return await store.get(path) is None  # type: ignore[attr-defined]


async def test_an_expired_session_is_not_resumed(backend: str, request: pytest.FixtureRequest) -> None:
    """Past its timeout the handed session is gone with its ephemerals: the successor has a new
    session and says so (``resumed`` false), and nothing of the old one reads as its own."""
    url = _with_timeout(str(request.getfixturevalue(f"{store_kind(backend)}_url")), 2)
    first = await open_store(url)
    await first.put("/gone", b"x", ephemeral=True)
    handle = first.session_handle()
    assert handle is not None
    await first.detach()
    check = await open_store(url)
    try:
        # ZooKeeper's minimum session timeout (2 ticks) and etcd's minimum TTL are above 2 s:
        # bounded by 30 s, not measured
        await eventually(lambda: _absent(check, "/gone"), 30, "the ephemeral of the abandoned session expired")
    finally:
        await check.close()
    await asyncio.sleep(0.5)
    second = await open_store(url, resume=handle)
    try:
        assert not second.resumed
        assert await second.get("/gone") is None
        made = await second.put("/gone", b"y", ephemeral=True)
        assert made.created_by_self
    finally:
        await second.close()
