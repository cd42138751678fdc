"""ZooKeeper requests kazoo never sends, written as raw packets (``metashift_lab.zkraw``, on the
agent's codec), against a real ZooKeeper and through the agent in front of ZooKeeper, of etcd and of Oxia,
with the same assertions: addWatch (persistent, persistent recursive), removeWatches and
checkWatches, getEphemerals, multiRead, getACL and setACL, whoAmI, getAllChildrenNumber; and an
opcode the agent does not serve, answered with UNIMPLEMENTED on a connection that stays up.

Known difference, not asserted: the agent stores no ACLs, so setACL changes no aversion there."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from metashift.stores.zookeeper.wire import ACL, AddWatchMode, Err, EventType, Op, Perms, WatcherType, Writer
from metashift_lab.zkraw import Event, RawZk, read_stat
from tests.harness import Gateways
from tests.zkfront import behind_url, ensure_chroot

Connect = Callable[[], Awaitable[RawZk]]


@pytest.fixture
async def raw(
    zk_target: str, request: pytest.FixtureRequest, gateways: Gateways, namespace: str
) -> AsyncIterator[Connect]:
    """Opens raw sessions to the target (``zookeeper``, ``agent-zk``, ``agent-etcd``, ``agent-oxia``); closes
    them after the test."""
    if zk_target == "zookeeper":
        server = request.getfixturevalue("zk_server")
        ensure_chroot(server, namespace)
        host, port, prefix = "127.0.0.1", int(server.port), namespace
    else:
        url = str(request.getfixturevalue(behind_url(zk_target)))
        agent = await gateways.start(url, {"zookeeper.listen": "127.0.0.1:0"})
        host, port, prefix = agent.zookeeper.host, int(agent.zookeeper.port), ""
    opened: list[RawZk] = []

    async def connect() -> RawZk:
        zk = await RawZk.connect(host, port, prefix)
        opened.append(zk)
        return zk

    yield connect
    for zk in opened:
        await zk.close()


async def test_add_watch_persistent(raw: Connect) -> None:
    watcher, writer = await raw(), await raw()
    assert (await watcher.add_watch("/p", AddWatchMode.PERSISTENT)).err == Err.OK
    await writer.create("/p", b"1")
    await writer.set_data("/p", b"2")
    await writer.create("/p/c", b"")
    await writer.set_data("/p/c", b"x")  # a child's data: not the node's, no event
    await writer.delete("/p/c")
    await writer.delete("/p")
    await writer.create("/p", b"again")  # the watch stayed after firing
    assert await watcher.events_until(Event(EventType.NODE_CREATED, "/p")) == [Event(EventType.NODE_CREATED, "/p")]
    assert await watcher.events_until(Event(EventType.NODE_CREATED, "/p")) == [
        Event(EventType.NODE_DATA_CHANGED, "/p"),
        Event(EventType.NODE_CHILDREN_CHANGED, "/p"),
        Event(EventType.NODE_CHILDREN_CHANGED, "/p"),
        Event(EventType.NODE_DELETED, "/p"),
        Event(EventType.NODE_CREATED, "/p"),
    ]


async def test_add_watch_persistent_recursive(raw: Connect) -> None:
    watcher, writer = await raw(), await raw()
    assert (await watcher.add_watch("/r", AddWatchMode.PERSISTENT_RECURSIVE)).err == Err.OK
    await writer.create("/r", b"")
    await writer.create("/r/a", b"")
    await writer.set_data("/r/a", b"1")
    await writer.create("/r/a/b", b"")
    await writer.delete("/r/a/b")
    await writer.create("/other", b"")  # outside the watched subtree
    await writer.set_data("/r", b"end")
    # no children events in recursive mode: the subtree's creations and deletions say it all
    assert await watcher.events_until(Event(EventType.NODE_DATA_CHANGED, "/r")) == [
        Event(EventType.NODE_CREATED, "/r"),
        Event(EventType.NODE_CREATED, "/r/a"),
        Event(EventType.NODE_DATA_CHANGED, "/r/a"),
        Event(EventType.NODE_CREATED, "/r/a/b"),
        Event(EventType.NODE_DELETED, "/r/a/b"),
        Event(EventType.NODE_DATA_CHANGED, "/r"),
    ]


async def test_remove_and_check_watches(raw: Connect) -> None:
    zk, writer = await raw(), await raw()
    await writer.create("/x", b"")
    await writer.create("/y", b"")
    assert await zk.watches_op(Op.CHECK_WATCHES, "/x", WatcherType.ANY) == Err.NOWATCHER
    assert await zk.watches_op(Op.REMOVE_WATCHES, "/x", WatcherType.ANY) == Err.NOWATCHER
    assert (await zk.get_data("/x", watch=True)).err == Err.OK
    assert await zk.watches_op(Op.CHECK_WATCHES, "/x", WatcherType.DATA) == Err.OK
    assert await zk.watches_op(Op.CHECK_WATCHES, "/x", WatcherType.CHILDREN) == Err.NOWATCHER
    assert await zk.watches_op(Op.REMOVE_WATCHES, "/x", WatcherType.CHILDREN) == Err.NOWATCHER
    assert await zk.watches_op(Op.REMOVE_WATCHES, "/x", WatcherType.DATA) == Err.OK
    assert await zk.watches_op(Op.CHECK_WATCHES, "/x", WatcherType.DATA) == Err.NOWATCHER
    assert await zk.watches_op(Op.REMOVE_WATCHES, "/x", WatcherType.DATA) == Err.NOWATCHER
    # a child watch and a persistent one, removed by ANY together
    assert (await zk.get_children("/x", watch=True)).err == Err.OK
    assert (await zk.add_watch("/x", AddWatchMode.PERSISTENT)).err == Err.OK
    assert await zk.watches_op(Op.CHECK_WATCHES, "/x", WatcherType.CHILDREN) == Err.OK
    assert await zk.watches_op(Op.REMOVE_WATCHES, "/x", WatcherType.ANY) == Err.OK
    assert await zk.watches_op(Op.CHECK_WATCHES, "/x", WatcherType.ANY) == Err.NOWATCHER
    # removed watches fire no more: only the marker's watch on /y does
    assert (await zk.get_data("/y", watch=True)).err == Err.OK
    await writer.set_data("/x", b"1")
    await writer.create("/x/kid", b"")
    await writer.set_data("/y", b"1")
    assert await zk.events_until(Event(EventType.NODE_DATA_CHANGED, "/y")) == [
        Event(EventType.NODE_DATA_CHANGED, "/y")
    ]


async def test_get_ephemerals(raw: Connect) -> None:
    zk, other = await raw(), await raw()
    await zk.create("/e", b"")
    await zk.create("/e/a", b"", flags=1)
    await zk.create("/e/b", b"", flags=1)
    await zk.create("/ex", b"", flags=1)
    await zk.create("/f", b"", flags=1)
    await other.create("/e/theirs", b"", flags=1)

    async def ephemerals(conn: RawZk, path: str) -> list[str]:
        reply = await conn.path_op(Op.GET_EPHEMERALS, path)
        assert reply.err == Err.OK
        return sorted(conn.unprefix(p) for p in reply.body.strings())

    assert await ephemerals(zk, "/e") == ["/e/a", "/e/b", "/ex"]  # a prefix of the path, as ZooKeeper matches
    assert await ephemerals(zk, "/e/") == ["/e/a", "/e/b"]
    assert await ephemerals(zk, "/") == ["/e/a", "/e/b", "/ex", "/f"]  # only this session's
    assert await ephemerals(other, "/") == ["/e/theirs"]
    assert await ephemerals(zk, "/nothing") == []


async def test_multi_read(raw: Connect) -> None:
    zk = await raw()
    await zk.create("/m", b"")
    await zk.create("/m/a", b"alpha")
    await zk.set_data("/m/a", b"alpha2")
    await zk.create("/m/b", b"")
    w = Writer()
    for op, path in ((Op.GET_DATA, "/m/a"), (Op.GET_CHILDREN, "/m"), (Op.GET_DATA, "/m/missing"),
                     (Op.GET_CHILDREN, "/m/b")):
        w.int(op).bool(False).int(-1).string(zk.path(path)).bool(False)
    w.int(-1).bool(True).int(-1)
    reply = await zk.call(Op.MULTI_READ, w.bytes())
    assert reply.err == Err.OK
    r = reply.body
    results: list[Any] = []
    while True:
        op, done, err = r.int(), r.bool(), r.int()
        if done:
            break
        if op == Op.GET_DATA:
            data, stat = r.buffer(), read_stat(r)
            results.append(("data", data, stat.version, stat.data_length, stat.num_children))
        elif op == Op.GET_CHILDREN:
            results.append(("children", sorted(r.strings())))
        else:
            results.append(("error", op, err, r.int()))
    assert results == [
        ("data", b"alpha2", 1, 6, 0),
        ("children", ["a", "b"]),
        ("error", Op.ERROR, Err.NONODE, Err.NONODE),
        ("children", []),
    ]


async def test_get_and_set_acl(raw: Connect) -> None:
    zk = await raw()
    await zk.create("/acl", b"data")
    reply = await zk.path_op(Op.GET_ACL, "/acl")
    assert reply.err == Err.OK
    assert reply.body.acls() == [ACL(Perms.ALL, "world", "anyone")]
    stat = read_stat(reply.body)
    assert (stat.version, stat.data_length, stat.aversion) == (0, 4, 0)
    assert (await zk.path_op(Op.GET_ACL, "/missing")).err == Err.NONODE

    def set_acl(path: str, acls: list[ACL], version: int) -> bytes:
        return Writer().string(zk.path(path)).acls(acls).int(version).bytes()

    everyone = [ACL(Perms.ALL, "world", "anyone")]
    assert (await zk.call(Op.SET_ACL, set_acl("/missing", everyone, -1))).err == Err.NONODE
    assert (await zk.call(Op.SET_ACL, set_acl("/acl", [], -1))).err == Err.INVALIDACL
    assert (await zk.call(Op.SET_ACL, set_acl("/acl", everyone, 5))).err == Err.BADVERSION
    reply = await zk.call(Op.SET_ACL, set_acl("/acl", everyone, 0))
    assert reply.err == Err.OK
    stat = read_stat(reply.body)
    assert (stat.version, stat.data_length) == (0, 4)


async def test_who_am_i(raw: Connect) -> None:
    zk = await raw()

    async def who() -> list[tuple[str, str]]:
        reply = await zk.call(Op.WHO_AM_I, b"")
        assert reply.err == Err.OK
        r = reply.body
        return sorted((r.string(), r.string()) for _ in range(r.int()))

    assert await who() == [("ip", "127.0.0.1")]
    assert await zk.add_auth("digest", b"alice:secret") == Err.OK
    assert await who() == [("digest", "alice"), ("ip", "127.0.0.1")]
    assert zk.connected


async def test_get_all_children_number(raw: Connect) -> None:
    zk = await raw()
    for path in ("/n", "/n/a", "/n/b", "/n/a/c", "/n/a/c/d", "/n/a/e"):
        await zk.create(path, b"")

    async def count(path: str) -> tuple[int, int | None]:
        reply = await zk.path_op(Op.GET_ALL_CHILDREN_NUMBER, path)
        return reply.err, reply.body.int() if reply.err == Err.OK else None

    assert await count("/n") == (Err.OK, 5)
    assert await count("/n/a") == (Err.OK, 3)
    assert await count("/n/b") == (Err.OK, 0)
    assert await count("/n/missing") == (Err.NONODE, None)



async def test_unknown_opcode_answers_unimplemented(raw: Connect, zk_target: str) -> None:
    zk = await raw()
    await zk.create("/u", b"still here")
    reply = await zk.call(999, Writer().string(zk.path("/u")).bytes())
    assert (reply.err, reply.body.remaining()) == (Err.UNIMPLEMENTED, 0)
    if zk_target == "zookeeper":
        # ZooKeeper's UnimplementedRequestProcessor closes the connection after its answer; the
        # agent goes further (the issue: never a dropped connection)
        with pytest.raises(ConnectionError):
            await zk.get_data("/u")
        return
    for _ in range(2):  # the connection and the session carry on
        got = await zk.get_data("/u")
        assert got.err == Err.OK and got.body.buffer() == b"still here"
        reply = await zk.call(999, b"")
        assert (reply.err, reply.body.remaining()) == (Err.UNIMPLEMENTED, 0)
    assert zk.connected
