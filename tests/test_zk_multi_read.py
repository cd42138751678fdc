"""ZooKeeper's bulk reads go in ``multiRead`` requests (ZooKeeper 3.6+), and answer exactly what
single reads answer; without multiRead (the pipelined fallback) the answers are the same."""

from __future__ import annotations

import os
import re

import pytest

from metashift.stores import NodeRead, Restore, open_store
from metashift.stores.zookeeper import ZooKeeperStore
from metashift_lab.servers import LocalZooKeeper


def _received(server: LocalZooKeeper) -> int:
    """The packets the server has received so far (its ``srvr`` answer)."""
    m = re.search(r"Received: (\d+)", server.four_letter("srvr"))
    assert m, "no srvr answer"
    return int(m.group(1))


async def _fill(url: str) -> dict[str, tuple[bytes, int]]:
    wanted: dict[str, tuple[bytes, int]] = {"/t": (b"", 0), "/t/big": (os.urandom(600_000), 2), "/t/empty": (b"", 5)}
    wanted.update({f"/t/n/{i:04d}": (b"v%d" % i, i % 4) for i in range(600)})
    wanted["/t/n"] = (b"parent", 1)
    async with await open_store(url) as store:
        await store.restore_many([Restore(p, v, n) for p, (v, n) in sorted(wanted.items()) if p.count("/") <= 2])
        await store.restore_many([Restore(p, v, n) for p, (v, n) in sorted(wanted.items()) if p.count("/") > 2])
    return wanted


async def test_bulk_reads_go_in_multi_reads(zk_server: LocalZooKeeper, zk_url: str) -> None:
    wanted = await _fill(zk_url)
    paths = sorted(p for p in wanted if p.startswith("/t/n/"))
    async with await open_store(zk_url, watch=False) as store:
        assert isinstance(store, ZooKeeperStore)
        before = _received(zk_server)
        got = await store.read_many(paths)
        sent = _received(zk_server) - before
        assert store._bulk_reads.multi_read is True
        assert got == [NodeRead(p, *wanted[p]) for p in paths]
        # 600 reads in a handful of requests (pings aside), not 600 requests
        assert sent < 60, sent
        before = _received(zk_server)
        nodes = {n.path: n for page in [p async for p in store.read_trees(["/t"])] for n in page}
        assert _received(zk_server) - before < 60
        assert nodes == {p: NodeRead(p, *wanted[p]) for p in wanted}


async def test_multi_read_false_in_the_url_reads_one_request_per_node(zk_server: LocalZooKeeper, zk_url: str) -> None:
    wanted = await _fill(zk_url)
    paths = sorted(p for p in wanted if p.startswith("/t/n/"))
    async with await open_store(zk_url + "?multi_read=false", watch=False) as store:
        before = _received(zk_server)
        assert await store.read_many(paths) == [NodeRead(p, *wanted[p]) for p in paths]
        assert _received(zk_server) - before >= len(paths)


@pytest.mark.parametrize("multi_read", [True, False], ids=["multiRead", "pipelined"])
async def test_bulk_reads_answer_what_single_reads_answer(zk_url: str, multi_read: bool) -> None:
    await _fill(zk_url)
    asked = ["/t/big", "/t/missing", "/t/empty", "/t/n", "/t/n/0007", "/t/n/missing/deeper", "/", "/t"]
    async with await open_store(zk_url + ("" if multi_read else "?multi_read=no"), watch=False) as store:
        assert isinstance(store, ZooKeeperStore)
        got = await store.read_many(asked * 40)  # several multiReads, answers kept in order
        for path, node in zip(asked * 40, got, strict=True):
            single = await store.get(path)
            if single is None:
                assert node is None, path
            else:
                assert node == NodeRead(path, single[0], single[1].version, single[1].ephemeral), path
        kids = await store._bulk_reads.reads([(8, "/t"), (8, "/t/missing"), (8, "/t/n")])
        assert sorted(kids[0].children) == ["big", "empty", "n"]
        assert kids[1] is None
        assert len(kids[2].children) == 600
        assert store._bulk_reads.multi_read is (True if multi_read else None)  # None: never tried
