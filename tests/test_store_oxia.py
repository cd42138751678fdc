"""Oxia's own cases, on a real Oxia server (four shards): keys routed to their shards as Oxia's own
client routes them, Pulsar's ``OxiaMetadataStore`` layout read back raw, per-shard sessions and
their owners, the version overrides of a copy, and notifications after the server went away."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from metashift.stores import BadVersion, NotEmpty, Restore, SessionEvent, Store, open_store
from metashift.stores.oxia import OxiaStore
from metashift.stores.oxia.connection import Shard
from metashift.stores.oxia.proto import client_pb2 as pb
from metashift.stores.oxia.session import owner_id
from metashift_lab.servers import LocalOxia, oxia_binary
from tests.harness import eventually, retry_while_unavailable


async def _raw(store: Store, key: str, shard: Shard | None = None) -> Any:
    """The record of ``key`` as the server holds it on ``shard`` (the one Oxia's hash names by
    default): a ``GetResponse`` (status, value, version), not read through the store's mapping."""
    assert isinstance(store, OxiaStore)
    conn = store._conn
    shard = shard or conn.shard_for(key)
    request = pb.ReadRequest(shard=shard.id, gets=[pb.GetRequest(key=key, include_value=True)])
    (answer,) = await conn.streamed(None, "Read", shard, request)
    return answer.gets[0]


def _key(store: Store, path: str) -> str:
    assert isinstance(store, OxiaStore)
    return store._keys.key(path)


def _cli(server: LocalOxia, *args: str) -> str:
    """Oxia's own command-line client (its Go client library), against ``server``."""
    binary = oxia_binary()
    assert binary is not None
    done = subprocess.run([binary, "client", "-a", server.address, "--log-level", "warn", *args],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


async def test_keys_spread_over_the_shards_and_every_operation_still_works(oxia_url: str) -> None:
    async with await open_store(oxia_url) as store:
        assert isinstance(store, OxiaStore)
        assert len(store._conn.shards) == 4
        names = [f"n{i:02d}" for i in range(40)]
        for name in names:
            await store.put(f"/spread/{name}", name.encode(), expected_version=-1)
        placed: dict[int, list[str]] = {}
        for name in names:
            key = _key(store, f"/spread/{name}")
            home = store._conn.shard_for(key)
            placed.setdefault(home.id, []).append(name)
            got = await _raw(store, key, home)
            assert (got.status, got.value) == (pb.OK, name.encode())
            for other in store._conn.shards:  # on its own shard only
                if other.id != home.id:
                    assert (await _raw(store, key, other)).status == pb.KEY_NOT_FOUND
        assert sorted(placed) == [0, 1, 2, 3], placed  # every shard holds some
        # listing, reading, conditional writes and deletes across shards
        assert await store.get_children("/spread") == names
        for name in names[:10]:
            stat = await store.put(f"/spread/{name}", b"again", expected_version=0)
            assert stat.version == 1
            with pytest.raises(BadVersion):
                await store.put(f"/spread/{name}", b"stale", expected_version=0)
            await store.delete(f"/spread/{name}", expected_version=1)
        assert await store.get_children("/spread") == names[10:]
        pages = [page async for page in store.walk("/")]
        assert {n.path for page in pages for n in page} == {"/spread", *(f"/spread/{n}" for n in names[10:])}


async def test_our_routing_is_oxias_own(oxia_server: LocalOxia, oxia_url: str) -> None:
    """Keys written by Oxia's own client (the Go library of its CLI) are found where our hash
    looks for them, and the other way round: both route a key to the same shard."""
    async with await open_store(oxia_url) as store:
        theirs = [f"/from-go/k{i}" for i in range(16)]
        for path in theirs:
            await asyncio.to_thread(_cli, oxia_server, "put", _key(store, path), f"go {path}")
        for path in theirs:
            got = await store.get(path)
            assert got is not None and got[0] == f"go {path}".encode(), path
        ours = [f"/from-python/k{i}" for i in range(16)]
        for path in ours:
            await store.put(path, f"py {path}".encode())
        for path in ours:
            out = await asyncio.to_thread(_cli, oxia_server, "get", _key(store, path))
            assert f"py {path}" in out, (path, out)


async def test_pulsars_layout_read_back_raw(oxia_url: str) -> None:
    """What Pulsar's ``OxiaMetadataStore`` reads: key = path, parents as empty records, children in
    ``[path/, path//)``, ``version_id`` / ``modifications_count``, sequential names ``%010d`` of the
    parent's modifications count after an empty put on it, delete refused under children."""
    async with await open_store(oxia_url) as store:
        await store.put("/tenants/public/ns", b"policies")
        parent = await _raw(store, _key(store, "/tenants/public"))
        assert (parent.status, parent.value, parent.version.modifications_count) == (pb.OK, b"", 0)
        assert (await _raw(store, _key(store, "/tenants"))).status == pb.OK
        assert isinstance(store, OxiaStore)
        start, end = store._keys.children_range("/tenants")
        assert (start, end) == (_key(store, "/tenants") + "/", _key(store, "/tenants") + "//")
        listed = await store._records.list(None, start, end)
        assert listed == [_key(store, "/tenants/public")]  # the grandchild is another level
        await store.put("/idgen", b"keep?", expected_version=-1)
        first = await store.put("/idgen/ID-", b"", sequential=True)
        counter = await _raw(store, _key(store, "/idgen"))
        assert first.path == f"/idgen/ID-{counter.version.modifications_count:010d}" == "/idgen/ID-0000000001"
        assert counter.value == b""  # Pulsar's empty put on the parent
        second = await store.put("/idgen/ID-", b"", sequential=True)
        assert second.path == "/idgen/ID-0000000002"
        top = await store.put("/top-", b"t", sequential=True)  # the parent of a top-level node is "/"
        assert (await _raw(store, _key(store, "/"))).status == pb.OK and top.path.startswith("/top-")
        with pytest.raises(NotEmpty):
            await store.delete("/idgen")
        # Stat.version is the record's count of modifications, whatever its version_id
        for i in range(3):
            await store.put("/counted", b"%d" % i)
        raw = await _raw(store, _key(store, "/counted"))
        got = await store.get("/counted")
        assert got is not None and got[1].version == raw.version.modifications_count == 2
        assert got[1].modification_timestamp == raw.version.modified_timestamp


async def test_ephemerals_live_on_a_session_of_their_shard_and_read_as_one_owner(
    oxia_url: str, open_stores: Callable[..., Any],
) -> None:
    """A store has a session on each shard it puts ephemerals on, all with its client identity: its
    ephemerals read as one owner (as a ZooKeeper session's), another store's as another."""
    one = await open_stores(oxia_url)
    two = await open_stores(oxia_url)
    watcher = await open_stores(oxia_url)
    assert isinstance(one, OxiaStore) and isinstance(two, OxiaStore)
    mine = [await one.put(f"/members/one-{i}", b"1", ephemeral=True) for i in range(12)]
    theirs = await two.put("/members/two", b"2", ephemeral=True)
    for stat in mine:
        shard = one._conn.shard_for(_key(one, stat.path))
        session = one._sessions.ids[shard.id]  # the session of the record's shard
        assert session != 0 and stat.owner == owner_id(one._sessions.identity, shard.id, session) == mine[0].owner
        raw = await _raw(one, _key(one, stat.path))
        assert raw.version.session_id == session
        seen = await watcher.get(stat.path)
        assert seen is not None and seen[1].ephemeral and seen[1].owner == stat.owner and not seen[1].created_by_self
    assert len(one._sessions.ids) > 1  # several shards, a session on each one used
    assert theirs.owner not in {s.owner for s in mine}  # never one owner for two stores' sessions
    await one.close()
    assert await watcher.get_children("/members") == ["two"]  # closed sessions: their records went
    await two.close()
    assert await watcher.get_children("/members") == []
    assert await watcher.exists("/members")  # the parent (persistent) stays


async def test_restore_keeps_the_exact_version_in_one_write(oxia_url: str) -> None:
    async with await open_store(oxia_url) as store:
        assert await store.restore("/copied", b"from zk", 1234) == 1
        got = await store.get("/copied")
        assert got is not None and (got[0], got[1].version) == (b"from zk", 1234)
        raw = await _raw(store, _key(store, "/copied"))
        # what Pulsar reads natively (version_id) and what PIP-454's copy writes: the source's version
        assert (raw.version.version_id, raw.version.modifications_count) == (1234, 1234)
        stat = await store.put("/copied", b"next", expected_version=1234)  # a version read before the move
        assert stat.version == 1235
        assert await store.restore("/copied", b"again", 5000, current=1235) == 1
        got = await store.get("/copied")
        assert got is not None and (got[0], got[1].version) == (b"again", 5000)
        results = await store.restore_many([Restore("/copied", b"stale", 6000, current=1235),
                                            Restore("/fresh", b"f", 7)])
        assert isinstance(results[0], BadVersion) and results[1] == 1
        got = await store.get("/copied")
        assert got is not None and (got[0], got[1].version) == (b"again", 5000)


async def test_a_sequence_counter_moves_in_one_write(oxia_url: str) -> None:
    async with await open_store(oxia_url) as store:
        await store.put("/ledgers/idgen", b"value kept", expected_version=-1)
        assert await store.sequence_counter("/ledgers/idgen") == 1
        before = await _raw(store, _key(store, "/ledgers/idgen"))
        assert await store.advance_sequence_counter("/ledgers/idgen", 10**12) == 1  # not 10**12 writes
        assert await store.sequence_counter("/ledgers/idgen") == 10**12
        after = await _raw(store, _key(store, "/ledgers/idgen"))
        assert after.value == b"value kept" and after.version.version_id == before.version.version_id
        made = await store.put("/ledgers/idgen/ID-", b"", sequential=True)
        assert made.path == f"/ledgers/idgen/ID-{10**12:010d}"
        assert await store.advance_sequence_counter("/ledgers/idgen", 5) == 0  # never backwards
        assert await store.advance_sequence_counter("/counters/new", 42) == 1  # a missing parent
        assert await store.sequence_counter("/counters/new") == 42
        assert (await store.put("/counters/new/c-", b"", sequential=True)).path == "/counters/new/c-0000000042"


async def test_a_broken_stream_is_connection_lost_then_reconnected(fresh_servers: Any) -> None:
    """The server goes away and comes back: the listeners hear ConnectionLost then Reconnected
    (they read again), the session survives a short outage, and later changes are delivered."""
    server = fresh_servers.oxia()
    url = server.url + "/broken?timeout=2&session_timeout=30"
    store = await open_store(url)
    events: list[SessionEvent] = []
    seen: list[Any] = []
    store.add_session_listener(events.append)
    store.add_listener(seen.append)
    try:
        await store.watch_ready()
        eph = await store.put("/eph", b"", ephemeral=True)
        server.stop()
        await eventually(lambda: SessionEvent.CONNECTION_LOST in events, within=30, what="ConnectionLost")
        server.start()
        await eventually(lambda: SessionEvent.RECONNECTED in events, within=60, what="Reconnected")
        assert events.index(SessionEvent.CONNECTION_LOST) < events.index(SessionEvent.RECONNECTED)
        assert SessionEvent.SESSION_LOST not in events
        got = await retry_while_unavailable(lambda: store.get("/eph"), attempts=40, delay=0.25)
        assert got is not None and got[1].owner == eph.owner  # same session: its ephemeral stayed
        async with await open_store(url) as writer:
            await writer.put("/after", b"w", expected_version=-1)
            await writer.put("/after", b"w2")
            await writer.delete("/after")
        wanted = {("Created", "/after"), ("Modified", "/after"), ("Deleted", "/after")}
        await eventually(lambda: wanted <= {(n.type.value, n.path) for n in seen}, within=30,
                         what="Created, Modified and Deleted of /after")
    finally:
        await store.close()


async def test_an_unknown_namespace_is_a_clear_error(oxia_server: LocalOxia) -> None:
    from metashift.stores import MetadataStoreError, StoreUnavailable

    with pytest.raises(MetadataStoreError) as err:
        await open_store(f"oxia://{oxia_server.address}/no-such-namespace?timeout=5")
    assert not isinstance(err.value, StoreUnavailable) and "no-such-namespace" in str(err.value)


async def test_every_stream_knows_grpcs_status_task_and_close_waits_for_it(oxia_url: str) -> None:
    """gRPC makes a task of its own per streaming call that ends a few loop turns after the call:
    the store finds it (by name: a Cython coroutine's repr names nothing in newer releases) and
    its close waits for it, so a closed store leaves no task of gRPC's behind."""
    store = await open_store(oxia_url + "/status-tasks")
    assert isinstance(store, OxiaStore)
    store.add_listener(lambda _n: None)  # the notification streams run
    try:
        await store.watch_ready()
        streams = [store._conn._stream, *store._notifications._calls.values()]
        assert len(streams) == 1 + len(store._conn.shards)
        tasks = set().union(*(call.metashift_tasks for call in streams))
        assert tasks and all(not t.done() for t in tasks), streams
    finally:
        await store.close()
    assert all(t.done() for t in tasks)


async def test_barrier_paths_land_one_on_each_shard(oxia_url: str) -> None:
    """Oxia orders notifications per shard only: the barrier's nodes are the path and a sibling
    on each other shard, the same names every time."""
    async with await open_store(oxia_url + "/barriers") as store:
        assert isinstance(store, OxiaStore)
        nodes = store.barrier_paths("/metashift/barrier")
        assert nodes[0] == "/metashift/barrier"
        assert all(n.startswith("/metashift/barrier-") for n in nodes[1:])
        shards = [store._conn.shard_for(_key(store, n)).id for n in nodes]
        assert sorted(shards) == sorted(s.id for s in store._conn.shards) and len(shards) == 4
        assert store.barrier_paths("/metashift/barrier") == nodes
        assert not store.notifications_in_order
