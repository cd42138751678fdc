"""The bulk reads the copy's executors list and read subtrees with (``read_trees``, ``read_many``),
on every backend."""

from __future__ import annotations

import pytest

from metashift.stores import NodeRead, Restore, open_store


@pytest.mark.parametrize("kind", ["zk", "etcd", "oxia"])
async def test_read_trees_lists_and_reads_subtrees_breadth_first(kind: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(f"{kind}_url")
    async with await open_store(url) as store:
        wanted = {
            "/a": (b"A", 2), "/a/b": (b"", 0), "/a/b/many": (b"", 0), "/a/b/c": (b"C" * 5000, 1), "/a/skip": (b"", 0),
            "/a-x": (b"", 0), "/a-x/y": (b"Y", 3), "/b": (b"", 0), "/b/z": (b"Z", 0),
        }  # fmt: skip
        for path, (value, version) in wanted.items():
            await store.restore(path, value, version)
        await store.restore("/a/skip/q", b"q", 0)
        await store.restore_many([Restore(f"/a/b/many/n-{i:05d}", b"%d" % i, i % 3) for i in range(2500)])
        await store.put("/a/e", b"mine", ephemeral=True)
        pages = [page async for page in store.read_trees(["/a-x", "/a"], prune=["/a/skip"])]
        nodes = [node for page in pages for node in page]
        got = {n.path: n for n in nodes}
        assert len(got) == len(nodes), "a node listed twice"
        depths = [n.path.count("/") for n in nodes]
        assert depths == sorted(depths), "not breadth first"
        assert "/b" not in got and "/b/z" not in got  # outside the roots
        assert "/a/skip" not in got and "/a/skip/q" not in got  # pruned
        for path, (value, version) in wanted.items():
            if path.startswith(("/a/", "/a-x")) or path == "/a":
                if path != "/a/skip":
                    assert (got[path].value, got[path].version, got[path].ephemeral) == (value, version, False), path
        assert got["/a/e"].ephemeral and got["/a/e"].value == b"mine"
        for i in range(2500):
            path = f"/a/b/many/n-{i:05d}"
            assert got[path] == NodeRead(path, b"%d" % i, i % 3), path
        assert len([p for p in got if p.startswith("/a/b/many/")]) == 2500
        # the root "/" holds every node (the coordinator's passes read a small tree from "/")
        everything = {n.path for page in [p async for p in store.read_trees(["/"], prune=["/a/skip"])] for n in page}
        assert everything >= {*got, "/b", "/b/z"} and "/a/skip/q" not in everything
        # a root that does not exist lists nothing
        assert [page async for page in store.read_trees(["/nothing"])] == []
        read = await store.read_many(["/a", "/nothing", "/a-x/y"])
        assert read == [NodeRead("/a", b"A", 2), None, NodeRead("/a-x/y", b"Y", 3)]


@pytest.mark.parametrize("kind", ["zk", "etcd", "oxia"])
async def test_ephemeral_owners_and_write_positions(kind: str, request: pytest.FixtureRequest) -> None:
    """``Stat.owner`` names the session an ephemeral lives on, the same for every reader and in a
    walk; ``position_of`` and ``NodeInfo.position`` grow with every write (``migrate check`` and
    the writes to a store a cluster left)."""
    url = request.getfixturevalue(f"{kind}_url")
    async with await open_store(url) as one, await open_store(url) as two:
        mine = await one.put("/members/one", b"1", ephemeral=True)
        theirs = await two.put("/members/two", b"2", ephemeral=True)
        plain = await one.put("/members/plain", b"p")
        assert mine.owner != 0 and theirs.owner != 0 and mine.owner != theirs.owner
        assert plain.owner == 0
        for reader in (one, two):
            got = {p: (await reader.get(f"/members/{p}")) for p in ("one", "two", "plain")}
            assert {p: g[1].owner for p, g in got.items() if g is not None} == {
                "one": mine.owner, "two": theirs.owner, "plain": 0}
        listed = {n.path: n for page in [p async for p in two.walk("/")] for n in page}
        assert (listed["/members/one"].owner, listed["/members/two"].owner) == (mine.owner, theirs.owner)
        assert listed["/members/plain"].owner == 0 and not listed["/members/plain"].ephemeral
        before = await one.position_of("/members/plain")
        assert before is not None and before == listed["/members/plain"].position
        assert await one.position_of("/members/nothing") is None
        await two.put("/members/plain", b"q")
        after = await one.position_of("/members/plain")
        assert after is not None and after > before
        assert after > max(n.position for n in listed.values())
        await one.put("/members/later", b"x")
        later = await one.position_of("/members/later")
        assert later is not None and later > after
