"""What only the ZooKeeper store does, on a real ZooKeeper: CONTAINER znodes read as persistent,
parents made persistent (so counters never reset), and the server asked for no event nobody
listens to."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import metashift
from metashift.stores.zookeeper import ZooKeeperStore, wire
from metashift.stores.zookeeper.wire import CreateMode, Op, Writer
from metashift_lab.servers import LocalZooKeeper
from metashift_lab.zkraw import RawZk
from tests.harness import eventually


async def test_container_znodes_are_not_ephemeral(zk_server: Any, zk_url: str, namespace: str) -> None:
    """Pulsar's ZKMetadataStore makes every missing parent a CONTAINER znode; such nodes (which
    can carry data) are persistent: not ephemeral in Stat nor in walk(), so the copy keeps them."""
    raw = await RawZk.connect("127.0.0.1", zk_server.port, namespace)
    store = await metashift.open_store(zk_url)
    try:
        body = Writer().string(raw.path("/parent")).buffer(b'{"tenant":1}').acls(wire.OPEN_ACL_UNSAFE)
        await raw.ok(Op.CREATE_CONTAINER, body.int(CreateMode.CONTAINER).bytes(), "createContainer /parent")
        await store.put("/parent/child", b"c", expected_version=-1)
        got = await store.get("/parent")
        assert got is not None and got[0] == b'{"tenant":1}'
        assert not got[1].ephemeral and not got[1].created_by_self
        listed = {node.path: node for page in [p async for p in store.walk("/")] for node in page}
        assert not listed["/parent"].ephemeral
    finally:
        await store.close()
        await raw.close()


class _FastContainerZooKeeper(LocalZooKeeper):
    """A ZooKeeper whose container manager runs every 100 ms (60 s by default)."""

    def _command(self) -> list[str]:
        command = super()._command()
        return [command[0], "-Dznode.container.checkIntervalMs=100", *command[1:]]


async def test_parents_made_for_a_put_stay_so_counters_never_reset(fresh_servers: Any) -> None:
    """Deliberately unlike Pulsar's ZKMetadataStore, which makes missing parents CONTAINER znodes:
    ZooKeeper deletes an emptied container, and with it the cversion behind sequential names. A
    BookKeeper id generator (``/ledgers/idgen/ID-`` made and deleted at once) whose parent was made
    on the fly would then hand out ledger ids from 0 again. metashift makes parents persistent."""
    server = _FastContainerZooKeeper()
    server.start()
    fresh_servers.started.append(server)
    store = await metashift.open_store(server.url + "/containers")
    try:
        first = await store.put("/ledgers/idgen/ID-", b"", ephemeral=True, sequential=True)
        await store.delete(first.path)
        await asyncio.sleep(1.0)  # ten rounds of the 100 ms container manager
        assert await store.exists("/ledgers/idgen")
        second = await store.put("/ledgers/idgen/ID-", b"", ephemeral=True, sequential=True)
        assert int(second.path.rsplit("-", 1)[1]) > int(first.path.rsplit("-", 1)[1])
    finally:
        await store.close()


async def test_a_zookeeper_store_stops_being_sent_what_no_listener_asks_for(
    zk_url: str, open_stores: Callable[..., Any]
) -> None:
    """The server itself stops sending the events of a subtree nobody listens to any more (a
    ZooKeeper 3.8 refuses to remove a persistent watch by its own type: ``Any`` it takes)."""
    store = await metashift.open_store(zk_url)
    writer = await open_stores(zk_url)
    try:
        assert isinstance(store, ZooKeeperStore)
        sent: list[str] = []
        session: Any = store._session
        deliver = session._on_watch_event

        def received(event: Any) -> None:  # every event the server sends, before any filtering
            sent.append(event.path)
            deliver(event)

        session._on_watch_event = received
        narrow = store.add_listener(lambda n: None, under="/a")
        wide = store.add_listener(lambda n: None)
        await store.watch_ready()
        await writer.put("/b", b"1", expected_version=-1)
        await eventually(lambda: any(p.endswith("/b") for p in sent), within=30, what="the event of /b")
        wide()
        await store.watch_ready()
        await writer.put("/b", b"2")
        await writer.put("/a", b"1", expected_version=-1)
        await eventually(lambda: any(p.endswith("/a") for p in sent), within=30, what="the event of /a")
        narrow()
        await store.watch_ready()
        await writer.put("/a", b"2")
        await writer.put("/a", b"3")
        await store.get("/a")  # answered after any event of the writes before it: they came by now
        assert [p.rsplit("/", 1)[1] for p in sent] == ["b", "a"], sent
    finally:
        await store.close()
