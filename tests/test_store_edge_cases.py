"""Edge cases of the store contract (Pulsar's MetadataStore: ZKMetadataStore, EtcdMetadataStore),
on the real servers. Tests marked ``xfail(strict=True)`` expose a known bug: the fix flips them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import metashift
from metashift import (
    BadVersion,
    InvalidPath,
    InvalidStoreURL,
    MetadataStore,
    NotFound,
    Notification,
    NotificationType,
    SessionEvent,
    Store,
    StoreUnavailable,
    ValueTooLarge,
)
from metashift.stores import DeleteOp, PutOp, parse_url
from tests.harness import retry_while_unavailable


async def _wait_for(predicate: Callable[[], bool], bound: float = 20.0) -> bool:
    """Poll ``predicate`` until it holds or ``bound`` seconds pass (a bound, never an assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    while loop.time() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


# ---- arguments ----------------------------------------------------------------------------------


async def test_batch_refuses_to_delete_the_root(store: MetadataStore) -> None:
    with pytest.raises(InvalidPath):
        await store.batch([DeleteOp("/")])
    # the namespace is intact and still usable
    stat = await store.put("/after", b"x", expected_version=-1)
    assert stat.version == 0
    assert await store.get_children("/") == ["after"]


async def test_batch_puts_accept_the_same_value_types_as_put(store: MetadataStore) -> None:
    await store.put("/single-ba", bytearray(b"ba"))  # type: ignore[arg-type]
    await store.put("/single-mv", memoryview(b"mv"))  # type: ignore[arg-type]
    results = await store.batch([PutOp("/batch-ba", bytearray(b"ba")), PutOp("/batch-mv", memoryview(b"mv"))])  # type: ignore[arg-type]
    assert all(isinstance(r, metashift.Stat) for r in results), results
    for path, value in (("/batch-ba", b"ba"), ("/batch-mv", b"mv"), ("/single-ba", b"ba"), ("/single-mv", b"mv")):
        got = await store.get(path)
        assert got is not None and got[0] == value and type(got[0]) is bytes


@pytest.mark.parametrize("version", [2**31, 2**63])
async def test_expected_version_out_of_range_is_a_bad_version(
    store: MetadataStore, backend: str, version: int, request: pytest.FixtureRequest
) -> None:
    """No node has such a version: a compare-and-set against it is a BadVersion (or the argument is
    refused as a ValueError before anything is sent), never a transport error; nothing is written."""
    await store.put("/huge", b"v0", expected_version=-1)
    with pytest.raises((BadVersion, ValueError)):
        await store.put("/huge", b"v1", expected_version=version)
    with pytest.raises((BadVersion, ValueError)):
        await store.delete("/huge", expected_version=version)
    got = await store.get("/huge")
    assert got is not None and got[0] == b"v0" and got[1].version == 0


async def test_long_path_with_a_value_at_the_limit_is_value_too_large(store: MetadataStore) -> None:
    """The size limit must count the whole request, not only the value: a long path plus a value
    of exactly ``max_value_size`` is over the server's packet/request limit."""
    path = "/" + "p" * 20_000
    with pytest.raises(ValueTooLarge):
        await store.put(path, b"x" * store.max_value_size)
    # the store is still usable and nothing was written
    assert not await store.exists(path)
    await store.put("/still-fine", b"ok", expected_version=-1)


@pytest.mark.parametrize(
    "url",
    [
        "zk://alice:s3@cr3t-pw@127.0.0.1:notaport/ns",
        "etcd://alice:s3@cr3t-pw@127.0.0.1:2379,/ns",
        "zookeeper://alice:cr3t-pw@127.0.0.1:2181/ns",
        "alice:cr3t-pw@127.0.0.1:2181",
    ],
    ids=["at-in-password-bad-port", "at-in-password-empty-host", "unknown-scheme", "no-scheme"],
)
def test_password_never_appears_in_url_errors(url: str) -> None:
    with pytest.raises(InvalidStoreURL) as err:
        parse_url(url)
    assert "cr3t-pw" not in str(err.value)


# ---- batches --------------------------------------------------------------------------------------


async def test_batch_with_the_same_path_twice_applies_in_order(store: MetadataStore) -> None:
    """A failing op makes ZooKeeper's multi (and etcd's txn) fall back to single calls: the two
    writes to one path must still apply in batch order, each with the result it gets alone."""
    results = await store.batch(
        [PutOp("/twice", b"1", expected_version=-1), PutOp("/twice", b"2", expected_version=0), DeleteOp("/missing")]
    )
    assert isinstance(results[0], metashift.Stat) and results[0].version == 0
    assert isinstance(results[1], metashift.Stat) and results[1].version == 1
    assert isinstance(results[2], NotFound)
    got = await store.get("/twice")
    assert got is not None and got[0] == b"2" and got[1].version == 1


async def test_sequential_and_ephemeral_puts_in_a_batch(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    other = await open_stores(store_url)
    await store.put("/bseq", b"", expected_version=-1)
    results = await other.batch(
        [
            PutOp("/bseq/n-", b"a", sequential=True),
            PutOp("/bseq/n-", b"b", sequential=True),
            PutOp("/bseq/e-", b"c", ephemeral=True, sequential=True),
            PutOp("/bseq/eph", b"d", ephemeral=True),
        ]
    )
    assert all(isinstance(r, metashift.Stat) for r in results), results
    made = [r.path for r in results if isinstance(r, metashift.Stat)]
    assert len(set(made)) == 4 and all(p.startswith("/bseq/") for p in made)
    assert made[0] != "/bseq/n-" and made[1] != "/bseq/n-" and made[2] != "/bseq/e-" and made[3] == "/bseq/eph"
    for path, value in zip(made, [b"a", b"b", b"c", b"d"], strict=True):
        got = await store.get(path)
        assert got is not None and got[0] == value and got[1].version == 0
    assert all(r.ephemeral for r in results[2:] if isinstance(r, metashift.Stat))
    await other.close()
    assert sorted(await store.get_children("/bseq")) == sorted(p.rsplit("/", 1)[1] for p in made[:2])


async def test_children_of_a_big_subtree(store: MetadataStore) -> None:
    """More keys than one listing page (etcd pages its prefix range): every child once, grandchildren
    folded into their child."""
    await store.put("/p", b"", expected_version=-1)
    await store.put("/p/a", b"", expected_version=-1)
    n = 10_050
    ops = [PutOp(f"/p/a/{i:05d}", b"", expected_version=-1) for i in range(n)]
    for start in range(0, n, 2000):
        results = await store.batch(ops[start : start + 2000])
        assert all(isinstance(r, metashift.Stat) for r in results)
    await store.put("/p/b", b"", expected_version=-1)
    await store.put("/p/c/x", b"")
    assert await store.get_children("/p") == ["a", "b", "c"]
    children = await store.get_children("/p/a")
    assert len(children) == n and children[0] == "00000" and children[-1] == f"{n - 1:05d}"


# ---- isolation between namespaces -------------------------------------------------------------------


async def test_sibling_namespaces_do_not_leak(
    store: Store, store_url: str, open_stores: Callable[..., Any]
) -> None:
    """A store at prefix/chroot /tN sees nothing of /tN0 or /tN-x (same string prefix, other
    namespaces): no children, no values, no walk entries, no notifications."""
    seen: list[Notification] = []
    store.add_listener(seen.append)
    base, _, query = store_url.partition("?")
    siblings = [await open_stores(f"{base}{suffix}{'?' + query if query else ''}") for suffix in ("0", "-x", ".y")]
    for other in siblings:
        await other.put("/leak", b"other", expected_version=-1)
        await other.put("/leak/child", b"other")
        await other.put("/top-", b"", sequential=True)  # etcd: writes the sibling's root key
        await other.put("/eph", b"", ephemeral=True)
    await store.put("/marker", b"mine", expected_version=-1)
    assert await _wait_for(lambda: any(n.path == "/marker" for n in seen))
    assert await store.get_children("/") == ["marker"]
    assert await store.get("/leak") is None and not await store.exists("/leak")
    assert await store.get_children("/leak") == []
    walked = [node.path async for page in store.walk("/") for node in page]
    assert walked == ["/marker"]
    assert {n.path for n in seen} <= {"/", "/marker"}, seen


async def test_a_listener_added_in_answer_to_an_event_hears_what_comes_after_it(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    """A listener that a notification makes another one add (the coordinator's tracker widens its
    watch when the leader's round begins) hears the changes after that event, never that event nor
    the ones before it again: on etcd its watch starts after the event, not at an older revision."""
    writer = await open_stores(store_url)  # another client: the watching store reads nothing meanwhile
    wide: list[Notification] = []

    def narrow(n: Notification) -> None:
        if n.path == "/marks/go" and len(removers) == 1:
            removers.append(store.add_listener(wide.append, under="/"))

    removers = [store.add_listener(narrow, under="/marks")]
    await store.watch_ready()
    await writer.put("/before", b"x", expected_version=-1)
    await writer.put("/marks/go", b"", expected_version=-1)
    assert await _wait_for(lambda: len(removers) == 2)
    await store.watch_ready()
    await writer.put("/after", b"x", expected_version=-1)
    assert await _wait_for(lambda: any(n.path == "/after" for n in wide))
    # the parent's ChildrenChanged that the same event gives may follow; nothing of the event itself
    assert {n.path for n in wide} <= {"/", "/marks", "/after"}, wide
    assert all(n.type is NotificationType.CHILDREN_CHANGED for n in wide if n.path == "/marks"), wide


# ---- life cycle ---------------------------------------------------------------------------------------


async def test_close_is_idempotent_and_leaves_nothing_running(store_url: str, open_stores: Callable[..., Any]) -> None:
    watcher = await open_stores(store_url)
    await asyncio.sleep(0.1)  # the watcher's own background tasks are all started
    before = set(asyncio.all_tasks())
    store = await metashift.open_store(store_url)
    await store.put("/eph-close", b"", ephemeral=True)
    await asyncio.gather(store.close(), store.close())
    await store.close()
    for _ in range(5):  # let tasks whose cancellation was requested run to their end
        await asyncio.sleep(0)
    leftover = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    assert leftover == []
    assert not await watcher.exists("/eph-close")
    with pytest.raises(StoreUnavailable):
        await store.get("/eph-close")
    with pytest.raises(StoreUnavailable):
        await store.put("/after-close", b"x")
    assert not await watcher.exists("/after-close")


async def test_blind_puts_racing_deletes_never_fail(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    """A blind put is create-or-update: a concurrent delete (or create) of the node, or of its
    parents, must never make it fail."""
    other = await open_stores(store_url)

    async def delete_quietly(path: str) -> None:
        try:
            await other.delete(path)
        except (NotFound, metashift.NotEmpty):
            pass

    for i in range(40):
        stats = await asyncio.gather(
            store.put("/race/node", f"{i}".encode()),
            delete_quietly("/race/node"),
            other.put("/race/node", b"other"),
            delete_quietly("/race/node"),
        )
        assert isinstance(stats[0], metashift.Stat) and isinstance(stats[2], metashift.Stat)
    got = await store.get("/race/node")
    assert got is None or got[0] in {b"other", b"39"}


# ---- server outages -----------------------------------------------------------------------------------




@pytest.mark.parametrize("kind", ["zk", "etcd", "oxia"])
async def test_session_lost_reported_while_the_server_stays_down(kind: str, fresh_servers: Any) -> None:
    server = fresh_servers.of(kind)
    store = await metashift.open_store(server.url + "/outage?session_timeout=2&timeout=2")
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    try:
        await store.put("/eph", b"", ephemeral=True)
        server.stop()
        assert await _wait_for(lambda: SessionEvent.CONNECTION_LOST in events, 15)
        # a session whose server is unreachable for longer than its timeout must be given up
        assert await _wait_for(lambda: SessionEvent.SESSION_LOST in events, 6), events
        server.start()
        assert await _wait_for(lambda: SessionEvent.SESSION_REESTABLISHED in events, 20), events
        lost = events.index(SessionEvent.SESSION_LOST)
        assert events.index(SessionEvent.CONNECTION_LOST) < lost < events.index(SessionEvent.SESSION_REESTABLISHED)
        # a new session: ephemerals can be made again, and they are ours
        stat = await retry_while_unavailable(
            lambda: store.put("/eph-again", b"", ephemeral=True), attempts=41, delay=0.25
        )
        got = await store.get("/eph-again")
        assert stat.ephemeral and got is not None and got[1].created_by_self
    finally:
        await store.close()


@pytest.mark.parametrize("kind", ["zk", "etcd", "oxia"])
async def test_notifications_resume_after_a_server_restart(kind: str, fresh_servers: Any) -> None:
    """The watch is re-established after the server comes back: changes made after that, by
    another client, are notified again."""
    server = fresh_servers.of(kind)
    url = server.url + "/restart?timeout=2&session_timeout=30"
    store = await metashift.open_store(url)
    seen: list[Notification] = []
    store.add_listener(seen.append)
    try:
        await store.put("/before", b"", expected_version=-1)
        assert await _wait_for(lambda: Notification(NotificationType.CREATED, "/before") in seen)
        server.stop()
        server.start()
        assert await retry_while_unavailable(lambda: store.get("/before"), attempts=41, delay=0.25) is not None
        writer = await metashift.open_store(url)
        try:
            # the watch comes back (ZooKeeper: re-added once reconnected; etcd: resumed): probe until it does
            for i in range(40):
                probe = Notification(NotificationType.CREATED, f"/probe-{i}")
                await writer.put(probe.path, b"")
                if await _wait_for(lambda probe=probe: probe in seen, 0.5):  # type: ignore[misc]
                    break
            else:
                pytest.fail("no notification after the server restart")
            for i in range(3):
                await writer.put(f"/after-{i}", b"w", expected_version=-1)
                await writer.put(f"/after-{i}", b"w2")
            await writer.delete("/before")
        finally:
            await writer.close()
        expected = [
            Notification(NotificationType.CREATED, "/after-2"),
            Notification(NotificationType.MODIFIED, "/after-2"),
            Notification(NotificationType.DELETED, "/before"),
            Notification(NotificationType.CHILDREN_CHANGED, "/"),
        ]
        assert await _wait_for(lambda: all(n in seen for n in expected)), seen
    finally:
        await store.close()
