"""The sequence counters and the long version chains the copy writes, on real servers: what
ZooKeeper's next sequential suffix is, how counters are raised by many steps on both stores
(exactly, history compacted as it grows), how etcd's counter steps and a restore's long chains
land (bytes, versions, the parent key's version), and the rules' per-node checks."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from aetcd import rpc

from metashift.copy.rules import Rules
from metashift.stores import MetadataStoreError, NodeRead, Restore, open_store, paths
from metashift.stores.bulk import COUNTER_PROBE
from metashift.stores.etcd import sequence_counters as etcd_counters


async def test_zookeeper_names_a_sequential_child_after_its_count_of_creations(zk_url: str) -> None:
    """ZooKeeper reports a cversion that counts deletions too, but names the next sequential
    child after the creations only: (cversion + children) / 2, what ``sequence_counter`` says."""
    async with await open_store(zk_url) as store:
        await store.put("/p", b"")
        made = [(await store.put("/p/s-", b"", sequential=True)).path for _ in range(3)]
        assert made == [f"/p/s-{i:010d}" for i in range(3)]
        await store.delete(made[0])
        await store.delete(made[1])
        assert await store.children_version("/p") == 5  # 3 creations + 2 deletions
        assert await store.sequence_counter("/p") == 3  # (5 + 1) / 2
        assert (await store.put("/p/s-", b"", sequential=True)).path == f"/p/s-{3:010d}"
        assert await store.sequence_counter("/p") == 4


async def test_zookeeper_counter_raised_by_many_steps_lands_exactly(zk_url: str) -> None:
    """Many multis of (create, delete) pairs, serialized once and sent many at a time: the
    counter lands on the exact step asked for, the parent's children and value stay, no
    throw-away child is left, and the next sequential child is named after that step."""
    async with await open_store(zk_url) as store:
        await store.put("/ids", b"keep")
        await store.put("/ids/kept", b"k")
        await store.put("/ids/s-", b"", sequential=True)  # creation 2 (suffix 1)
        assert await store.sequence_counter("/ids") == 2
        steps = 3 * 256 * 32 + 37  # more multis than are in flight, and a partial one
        assert await store.advance_sequence_counter("/ids", 2 + steps) == 2 * steps
        assert await store.sequence_counter("/ids") == 2 + steps
        assert sorted(await store.get_children("/ids")) == ["kept", "s-0000000001"]
        assert COUNTER_PROBE not in await store.get_children("/ids")
        got = await store.get("/ids")
        assert got is not None and got[0] == b"keep"
        assert (await store.put("/ids/s-", b"", sequential=True)).path == f"/ids/s-{2 + steps:010d}"
        assert await store.advance_sequence_counter("/ids", 10) == 0  # already past: nothing
        # a counter that does not exist yet: its parent is made (empty), then raised
        assert await store.advance_sequence_counter("/fresh", 300) == 600
        assert await store.sequence_counter("/fresh") == 300


async def test_etcd_counters_share_rounds_and_compact_as_they_grow(
    etcd_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several counters raised together land exactly (their steps share txns), each keeps its
    value, and the history is compacted every ``COMPACT_EVERY_STEPS`` steps: a revision from
    before the raise is gone from the server."""
    monkeypatch.setattr(etcd_counters, "COMPACT_EVERY_STEPS", 1000)
    async with await open_store(etcd_url) as opened:
        store: Any = opened  # its connection and keys, to read an old revision
        await store.restore("/a", b"va", 0)
        await store.restore("/b", b"vb", 4)
        old = await store._conn.range(None, rpc.RangeRequest(key=store._keys.key("/a")))
        wanted = {"/a": 2600, "/b": 1500, "/c": 3}
        assert await store.advance_sequence_counters(wanted) == (2600 - 1) + (1500 - 5) + 3
        assert {p: await store.sequence_counter(p) for p in wanted} == wanted
        assert [(await store.get(p) or (None,))[0] for p in wanted] == [b"va", b"vb", b""]
        with pytest.raises(MetadataStoreError, match="compacted"):
            await store._conn.range(None, rpc.RangeRequest(key=store._keys.key("/a"), revision=old.header.revision))
        assert await store.advance_sequence_counters({"/a": 5, "/b": 1500}) == 0


async def test_etcd_counter_reaches_its_step_exactly_and_keeps_the_value(etcd_url: str) -> None:
    async with await open_store(etcd_url) as store:
        await store.restore("/ctr", b"keep", 2)
        assert await store.sequence_counter("/ctr") == 3  # the key's etcd version
        assert await store.advance_sequence_counter("/ctr", 1500) == 1497
        assert await store.sequence_counter("/ctr") == 1500
        got = await store.get("/ctr")
        assert got is not None and (got[0], got[1].version) == (b"keep", 1499)
        assert await store.advance_sequence_counter("/ctr", 1000) == 0  # already past: nothing
        assert await store.sequence_counter("/ctr") == 1500
        # Pulsar's layout: the next sequential child is named after the parent key's version (unpadded)
        assert (await store.put("/ctr/id-", b"", sequential=True)).path == "/ctr/id-1500"


async def test_etcd_restore_of_several_long_chains_keeps_every_version(etcd_url: str) -> None:
    """Chains far longer than the batch's txns (their steps go in rounds shared by the long
    chains), beside many short ones: every node lands with its bytes and its exact version."""
    async with await open_store(etcd_url) as store:
        long = {"/chains/a": 900, "/chains/b": 700, "/chains/c": 700, "/chains/d": 40}
        items = [Restore(p, p.encode() * 3, v) for p, v in long.items()]
        items += [Restore(f"/chains/short/n-{i:04d}", b"%d" % i, i % 4) for i in range(600)]
        results = await store.restore_many(items)
        assert results == [item.version + 1 for item in items]
        got = await store.read_many([item.path for item in items])
        assert got == [NodeRead(item.path, item.value, item.version) for item in items]
        # behind nodes resume from their version: a second restore to higher versions
        more = [Restore(p, b"again", v + 333) for p, v in long.items()]
        assert await store.restore_many([Restore(m.path, m.value, m.version, v) for m, v in
                                         zip(more, long.values(), strict=True)]) == [333] * len(more)
        assert await store.read_many([m.path for m in more]) == [NodeRead(m.path, m.value, m.version) for m in more]


async def test_etcd_read_trees_with_roots_at_several_depths(etcd_url: str) -> None:
    async with await open_store(etcd_url) as store:
        for path in ("/r/a/b", "/r/a/b/c", "/r/a/b-c/d", "/r/a-x", "/r/a-x/y", "/r/z/q"):
            await store.restore(path, path.encode(), 0)
        got = {n.path async for page in store.read_trees(["/r/a/b", "/r/a-x"]) for n in page}
        assert got == {"/r/a/b", "/r/a/b/c", "/r/a-x", "/r/a-x/y"}


def test_rules_checks_match_their_definition_and_survive_pickling() -> None:
    rules = pickle.loads(pickle.dumps(Rules(excluded=("/zookeeper", "/x/y"), counters=("/c/*", "/ledgers/idgen"),
                                            ledgers_roots=("/bk/ledgers",))))  # fmt: skip
    for path in ("/zookeeper", "/zookeeper/q", "/zookeeperx", "/x", "/x/y", "/x/y/z", "/x/yz", "/c", "/c/a", "/c/a/b",
                 "/ledgers/idgen", "/ledgers/idgen-long", "/ledgers/idgen/x"):  # fmt: skip
        assert rules.is_excluded(path) == any(paths.is_under(path, r) for r in rules.excluded), path
    assert [p for p in ("/c", "/c/a", "/c/a/b", "/ledgers/idgen", "/ledgers/idgen-long") if rules.is_counter(p)] == [
        "/c/a", "/ledgers/idgen"]  # fmt: skip
    # the ledger-id generator of each ledgers root, by path: R/idgen, R/idgen-long, R/idgen-long/<any>
    generator = ["/bk/ledgers/idgen", "/bk/ledgers/idgen-long", "/bk/ledgers/idgen-long/HOB-0000000003",
                 "/bk/ledgers/idgen-long/anything"]  # fmt: skip
    others = ["/bk/ledgers", "/bk/ledgers/idgen/ID-3", "/bk/ledgers/idgen-long/HOB-1/ID-5", "/bk/ledgers/idgenx",
              "/ledgers/idgen", "/ledgers/idgen-long/HOB-0000000001", "/bk/ledgers/idgen-longer/HOB-1"]  # fmt: skip
    assert [rules.ledger_root_of(p) for p in generator + others] == ["/bk/ledgers"] * 4 + [None] * 7
    assert all(rules.is_counter(p) and not rules.keeps_version(p) for p in generator)
    assert all(rules.keeps_version(p) for p in others)
    generated = [p for p in generator + others if rules.is_generated_id(p)]
    assert generated == ["/bk/ledgers/idgen/ID-3", "/bk/ledgers/idgen-long/HOB-1/ID-5"]
    above = [p for p in ("/", "/x", "/zookeeper", "/x/y", "/x/y/z", "/c") if rules.is_excluded_ancestor(p)]
    assert above == ["/", "/x"]
    assert Rules(excluded=("/",)).is_excluded("/anything")
    assert Rules() == pickle.loads(pickle.dumps(Rules()))
    assert Rules().ledger_root_of("/ledgers/idgen") == "/ledgers"
