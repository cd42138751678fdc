"""The store contract (Pulsar's MetadataStore semantics), run against every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import metashift
from metashift import (
    AlreadyExists,
    BadVersion,
    InvalidPath,
    MetadataStore,
    NotFound,
    Notification,
    NotificationType,
    ValueTooLarge,
)
from metashift.stores import DeleteOp, ExistsOp, GetChildrenOp, GetOp, PutOp, Stat
from tests.harness import BACKENDS, GATEWAY_BACKENDS, SIMULATED_BACKENDS, store_kind, user_roots


@pytest.fixture(params=BACKENDS + GATEWAY_BACKENDS + SIMULATED_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every store directly, the same stores through the agent's gRPC gateway, and the
    simulator's in-process store (``metashift.stores.simulated``), which must keep the same
    contract to stand in for them."""
    return str(request.param)


async def test_create_get_and_missing(store: MetadataStore) -> None:
    assert await store.get("/a") is None
    assert not await store.exists("/a")
    stat = await store.put("/a", b"one", expected_version=-1)
    assert stat.path == "/a" and stat.version == 0 and not stat.ephemeral
    got = await store.get("/a")
    assert got is not None
    value, stat2 = got
    assert value == b"one" and stat2.version == 0 and stat2.path == "/a"
    assert await store.exists("/a")


async def test_versions_climb_through_many_puts(store: MetadataStore) -> None:
    for i in range(60):
        stat = await store.put("/v", f"value-{i}".encode())
        assert stat.version == i
    got = await store.get("/v")
    assert got is not None and got[0] == b"value-59" and got[1].version == 59


async def test_compare_and_set(store: MetadataStore) -> None:
    await store.put("/cas", b"0", expected_version=-1)
    stat = await store.put("/cas", b"1", expected_version=0)
    assert stat.version == 1
    with pytest.raises(BadVersion) as err:
        await store.put("/cas", b"stale", expected_version=0)
    assert err.value.path == "/cas" and "/cas" in str(err.value)
    got = await store.get("/cas")
    assert got is not None and got[0] == b"1" and got[1].version == 1
    # a compare-and-set on a missing node fails too, and creates nothing
    with pytest.raises(BadVersion):
        await store.put("/cas-missing", b"x", expected_version=3)
    assert not await store.exists("/cas-missing")


async def test_create_only_if_missing(store: MetadataStore) -> None:
    await store.put("/once", b"first", expected_version=-1)
    with pytest.raises(AlreadyExists) as err:
        await store.put("/once", b"second", expected_version=-1)
    assert isinstance(err.value, BadVersion) and err.value.path == "/once"
    got = await store.get("/once")
    assert got is not None and got[0] == b"first" and got[1].version == 0


async def test_delete(store: MetadataStore) -> None:
    with pytest.raises(NotFound) as err:
        await store.delete("/gone")
    assert err.value.path == "/gone"
    await store.put("/d", b"x", expected_version=-1)
    await store.put("/d", b"y")
    with pytest.raises(BadVersion):
        await store.delete("/d", expected_version=0)
    assert await store.exists("/d")
    await store.delete("/d", expected_version=1)
    assert await store.get("/d") is None
    with pytest.raises(NotFound):
        await store.delete("/d", expected_version=1)


async def test_ephemerals_vanish_with_their_session(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    other = await open_stores(store_url)
    await store.put("/eph-parent", b"", expected_version=-1)
    stat = await other.put("/eph-parent/mine", b"alive", ephemeral=True)
    assert stat.ephemeral
    got = await store.get("/eph-parent/mine")
    assert got is not None and got[1].ephemeral and not got[1].created_by_self
    own = await other.get("/eph-parent/mine")
    assert own is not None and own[1].created_by_self
    await other.close()
    assert await store.get("/eph-parent/mine") is None
    assert await store.get_children("/eph-parent") == []
    # persistent nodes of the closed session stay
    assert await store.exists("/eph-parent")


async def test_sequential_names_and_order(store: MetadataStore) -> None:
    await store.put("/seq", b"", expected_version=-1)
    made = []
    for _ in range(12):
        stat = await store.put("/seq/id-", b"s", sequential=True)
        assert stat.path.startswith("/seq/id-") and stat.path != "/seq/id-"
        made.append(stat.path)
        assert await store.exists(stat.path)
    suffixes = [int(p.rsplit("id-", 1)[1]) for p in made]
    assert suffixes == sorted(suffixes) and len(set(suffixes)) == 12
    children = await store.get_children("/seq")
    assert sorted(children) == children
    assert set(children) == {p.rsplit("/", 1)[1] for p in made}


async def test_a_sequential_name_may_be_the_suffix_alone(store: MetadataStore) -> None:
    """A sequential put of "/queue/" names "/queue/<suffix>" (ZooKeeper checks the path with
    its suffix); a plain put of a path ending in '/' stays invalid."""
    await store.put("/queue", b"", expected_version=-1)
    first = await store.put("/queue/", b"a", sequential=True)
    second = (await store.batch([PutOp("/queue/", b"b", sequential=True)]))[0]
    assert isinstance(second, Stat)
    for stat in (first, second):
        assert stat.path.startswith("/queue/") and stat.path[len("/queue/"):].isdigit(), stat.path
    assert int(second.path.rsplit("/", 1)[1]) > int(first.path.rsplit("/", 1)[1])
    got = await store.get(first.path)
    assert got is not None and got[0] == b"a"
    with pytest.raises(InvalidPath):
        await store.put("/queue/", b"c")


async def test_sequential_ephemeral(store: MetadataStore) -> None:
    await store.put("/election", b"", expected_version=-1)
    a = await store.put("/election/n-", b"a", ephemeral=True, sequential=True)
    b = await store.put("/election/n-", b"b", ephemeral=True, sequential=True)
    assert int(a.path.rsplit("-", 1)[1]) < int(b.path.rsplit("-", 1)[1])
    got = await store.get(b.path)
    assert got is not None and got[0] == b"b" and got[1].ephemeral


async def test_children_sorted_and_empty_when_missing(store: MetadataStore) -> None:
    assert await store.get_children("/nothing/here") == []
    await store.put("/kids", b"", expected_version=-1)
    assert await store.get_children("/kids") == []
    for name in ["zeta", "alpha", "Mid", "b10", "b2"]:
        await store.put(f"/kids/{name}", b"")
    await store.put("/kids/alpha/grandchild", b"")
    assert await store.get_children("/kids") == sorted(["zeta", "alpha", "Mid", "b10", "b2"])
    assert await store.get_children("/kids/alpha") == ["grandchild"]


async def test_nodes_read_side_by_side_each_get_their_own_answer(store: MetadataStore) -> None:
    """Many ``get_node`` calls at once (an etcd store sends them in shared txns): each gets its own
    value, version and children, a missing node ``None``, and an error its own call."""
    await store.put("/side", b"parent", expected_version=-1)
    for i in range(70):
        await store.put(f"/side/n{i}", f"value {i}".encode(), expected_version=-1)
        for _ in range(i % 3):
            await store.put(f"/side/n{i}", f"value {i}".encode())
    for k in range(3):
        await store.put(f"/side/n5/k{k}", b"")
    wanted = ["/side", *(f"/side/n{i}" for i in range(70)), "/side/missing"]
    got = await asyncio.gather(*(store.get_node(p) for p in wanted))
    assert got[0] is not None and got[0][0] == b"parent" and len(got[0][2]) == 70
    for i in range(70):
        node = got[1 + i]
        assert node is not None
        value, stat, kids = node
        assert (value, stat.version) == (f"value {i}".encode(), i % 3), (i, node)
        assert kids == ([f"k{k}" for k in range(3)] if i == 5 else [])
    assert got[-1] is None
    with pytest.raises(InvalidPath):
        await asyncio.gather(store.get_node("/side/n1"), store.get_node("bad path"))


async def test_notifications(store: MetadataStore, store_url: str, open_stores: Callable[..., Any]) -> None:
    seen: asyncio.Queue[Notification] = asyncio.Queue()
    store.add_listener(seen.put_nowait)
    await store.put("/watched", b"", expected_version=-1)
    await store.get_children("/watched")
    await _await_notification(seen, NotificationType.CREATED, "/watched")
    writer = await open_stores(store_url)  # changes made by another session are seen too
    await writer.put("/watched/child", b"1", expected_version=-1)
    await _await_notification(seen, NotificationType.CREATED, "/watched/child")
    await _await_notification(seen, NotificationType.CHILDREN_CHANGED, "/watched")
    await store.get("/watched/child")
    await writer.put("/watched/child", b"2")
    await _await_notification(seen, NotificationType.MODIFIED, "/watched/child")
    await store.get("/watched/child")
    await writer.delete("/watched/child")
    await _await_notification(seen, NotificationType.DELETED, "/watched/child")


async def test_listeners_hear_only_their_subtree_and_the_store_watches_only_that(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    scoped: asyncio.Queue[Notification] = asyncio.Queue()
    store.add_listener(scoped.put_nowait, under="/scoped")
    await store.watch_ready()
    writer = await open_stores(store_url)
    await writer.put("/other", b"x", expected_version=-1)
    await writer.put("/scoped", b"", expected_version=-1)
    await writer.put("/scoped/child", b"1", expected_version=-1)
    await _await_notification(scoped, NotificationType.CREATED, "/scoped/child")
    got = set()
    while not scoped.empty():
        got.add(scoped.get_nowait().path)
    assert got <= {"/scoped", "/scoped/child"}, got  # nothing from outside its subtree
    everything: asyncio.Queue[Notification] = asyncio.Queue()
    remove = store.add_listener(everything.put_nowait)
    await store.watch_ready()
    await writer.put("/other", b"y")
    await _await_notification(everything, NotificationType.MODIFIED, "/other")
    assert store.watched == {"/"}
    _drain(everything)
    remove()
    assert store.watched == {"/scoped"}
    await writer.put("/scoped/child", b"2")
    await _await_notification(scoped, NotificationType.MODIFIED, "/scoped/child")
    await writer.put("/other", b"z")
    await writer.put("/scoped/child", b"3")
    await _await_notification(scoped, NotificationType.MODIFIED, "/scoped/child")
    assert everything.empty()  # removed: a store delivers in order, so it would have had these by now


def _drain(queue: asyncio.Queue[Notification]) -> list[Notification]:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


async def _await_notification(queue: asyncio.Queue[Notification], kind: NotificationType, path: str) -> None:
    """Wait (bounded, so a missing notification fails the test instead of hanging it)."""
    async def find() -> None:
        while True:
            n = await queue.get()
            if n.type == kind and n.path == path:
                return

    try:
        await asyncio.wait_for(find(), timeout=15)
    except TimeoutError:
        pytest.fail(f"no {kind.value} notification for {path}")


@pytest.mark.parametrize(
    "value",
    [b"", b"\x00", b"a\x00b\x00", bytes(range(256)), b"\xff\xfe\x80 not utf-8 \xc3\x28"],
    ids=["empty", "nul", "embedded-nul", "all-bytes", "non-utf8"],
)
async def test_values_round_trip_byte_for_byte(store: MetadataStore, value: bytes) -> None:
    await store.put("/bin", value, expected_version=-1)
    got = await store.get("/bin")
    assert got is not None and got[0] == value


async def test_value_at_the_size_limit(store: MetadataStore) -> None:
    value = bytes(i % 251 for i in range(store.max_value_size))
    await store.put("/big", value, expected_version=-1)
    got = await store.get("/big")
    assert got is not None and got[0] == value


async def test_value_over_the_limit_is_rejected_and_nothing_written(store: MetadataStore) -> None:
    with pytest.raises(ValueTooLarge) as err:
        await store.put("/too-big", b"x" * (store.max_value_size + 1))
    assert err.value.path == "/too-big"
    assert not await store.exists("/too-big")
    await store.put("/too-big-existing", b"small", expected_version=-1)
    with pytest.raises(ValueTooLarge):
        await store.put("/too-big-existing", b"x" * (store.max_value_size + 1))
    got = await store.get("/too-big-existing")
    assert got is not None and got[0] == b"small" and got[1].version == 0


@pytest.mark.parametrize(
    "path",
    ["", "relative", "/trailing/", "/double//slash", "/dot/./x", "/dotdot/../x", "/nul\x00", "/ctl\x01", "/emoji-🚀"],
)
async def test_invalid_paths_are_rejected(store: MetadataStore, path: str) -> None:
    with pytest.raises(InvalidPath):
        await store.put(path, b"x")
    with pytest.raises(InvalidPath):
        await store.get(path)
    with pytest.raises(InvalidPath):
        await store.delete(path)
    assert await user_roots(store) == []


async def test_deep_paths(store: MetadataStore) -> None:
    path = "".join(f"/level{i}" for i in range(40))
    await store.put(path, b"deep")
    got = await store.get(path)
    assert got is not None and got[0] == b"deep"
    assert await store.get_children("/level0") == ["level1"]


@pytest.mark.parametrize("name", ["with space", "ünïcødé-名前", "100%25 sure", "%s%d", "back\\slash", "a:b=c,d@e"])
async def test_names_with_spaces_unicode_and_percent(store: MetadataStore, name: str) -> None:
    await store.put("/names", b"", expected_version=-1)
    path = f"/names/{name}"
    await store.put(path, name.encode(), expected_version=-1)
    got = await store.get(path)
    assert got is not None and got[0] == name.encode() and got[1].path == path
    assert await store.get_children("/names") == [name]


async def test_batch_results_are_independent(store: MetadataStore) -> None:
    await store.put("/b1", b"one", expected_version=-1)
    results = await store.batch(
        [
            GetOp("/b1"),
            GetOp("/b-missing"),
            PutOp("/b2", b"two", expected_version=-1),
            PutOp("/b1", b"stale", expected_version=7),
            ExistsOp("/b1"),
            DeleteOp("/b-missing"),
            GetChildrenOp("/"),
        ]
    )
    assert isinstance(results[0], tuple) and results[0][0] == b"one"
    assert results[1] is None
    assert isinstance(results[2], metashift.Stat) and results[2].version == 0
    assert isinstance(results[3], BadVersion)
    assert results[4] is True
    assert isinstance(results[5], NotFound)
    assert isinstance(results[6], list) and "b1" in results[6]
    got = await store.get("/b1")
    assert got is not None and got[0] == b"one"


async def test_batch_operations_on_one_path_apply_in_order(store: MetadataStore) -> None:
    """Each operation on a path sees the ones before it in the batch, as single calls would."""
    results = await store.batch(
        [
            PutOp("/seq", b"1", expected_version=-1),
            GetOp("/seq"),
            DeleteOp("/seq", expected_version=5),
            PutOp("/seq", b"2", expected_version=0),
            GetOp("/seq"),
            PutOp("/other", b"x"),
            DeleteOp("/seq", expected_version=1),
            ExistsOp("/seq"),
        ]
    )
    assert isinstance(results[0], metashift.Stat) and results[0].version == 0
    assert isinstance(results[1], tuple) and results[1][0] == b"1" and results[1][1].version == 0
    assert isinstance(results[2], BadVersion) and not isinstance(results[2], NotFound)
    assert isinstance(results[3], metashift.Stat) and results[3].version == 1
    assert isinstance(results[4], tuple) and results[4][0] == b"2" and results[4][1].version == 1
    assert isinstance(results[5], metashift.Stat)
    assert results[6] is None and results[7] is False
    assert not await store.exists("/seq")


async def test_a_child_under_an_ephemeral(store: MetadataStore, backend: str) -> None:
    """ZooKeeper refuses it (InvalidPath, nothing written); etcd, which has no parents, accepts it
    as Pulsar's etcd store does, and so does Oxia (records only, whose parents Pulsar's store makes
    without checking what they are)."""
    await store.put("/eph-parent", b"e", ephemeral=True)
    if store_kind(backend) == "zk":
        with pytest.raises(InvalidPath) as err:
            await store.put("/eph-parent/child", b"c")
        assert err.value.path == "/eph-parent/child" and "ephemeral" in str(err.value)
        assert not await store.exists("/eph-parent/child")
    else:
        await store.put("/eph-parent/child", b"c")
        assert await store.get_children("/eph-parent") == ["child"]


async def test_bad_batch_is_rejected_before_anything_is_sent(store: MetadataStore) -> None:
    with pytest.raises(InvalidPath):
        await store.batch([PutOp("/ok", b"1"), PutOp("bad", b"2")])
    assert not await store.exists("/ok")


async def test_timestamps(store: MetadataStore, backend: str) -> None:
    stat = await store.put("/ts", b"x")
    got = await store.get("/ts")
    assert got is not None
    if store_kind(backend) in ("zk", "oxia"):  # Oxia's records carry both, Pulsar's Oxia store shows them
        assert got[1].creation_timestamp > 1_600_000_000_000
        assert got[1].modification_timestamp >= got[1].creation_timestamp
    else:  # Pulsar's etcd store keeps no timestamps
        assert got[1].creation_timestamp == 0 == got[1].modification_timestamp
    assert stat.version == got[1].version
