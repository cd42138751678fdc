"""The sample-tree generator: a Pulsar + BookKeeper shaped tree, the same for the same seed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from metashift import Store
from metashift_lab.sample_tree import generate

TOPICS = 60


async def _snapshot(store: Store) -> dict[str, tuple[bytes, int, bool]]:
    out: dict[str, tuple[bytes, int, bool]] = {}
    async for page in store.walk("/"):
        for node in page:
            got = await store.get(node.path)
            assert got is not None
            out[node.path] = (got[0], got[1].version, got[1].ephemeral)
    return out


async def test_same_seed_same_tree_other_seed_other_tree(
    zk_url: str, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    a, b, c = await open_stores(zk_url + "/a"), await open_stores(etcd_url + "/b"), await open_stores(zk_url + "/c")
    await generate(a, TOPICS, seed=11, ephemerals=False)
    await generate(b, TOPICS, seed=11, ephemerals=False)
    await generate(c, TOPICS, seed=12, ephemerals=False)
    snap_a, snap_b, snap_c = await _snapshot(a), await _snapshot(b), await _snapshot(c)
    counters = {"/ledgers/idgen", "/ledgers/idgen-long/HOB-0000000001", "/counters/producer-name"}
    # the same bytes and versions on ZooKeeper and on etcd; counter parents' versions are the
    # counters themselves on etcd, so only their values compare
    assert {p: v for p, v in snap_a.items() if p not in counters} == {
        p: v for p, v in snap_b.items() if p not in counters
    }
    assert snap_a != snap_c


async def test_tree_has_pulsar_and_bookkeeper_shape(store: Store) -> None:
    tree = await generate(store, TOPICS, seed=3)
    snap = await _snapshot(store)
    persistent = {p: v for p, v in snap.items() if not v[2]}
    ephemeral = {p for p, v in snap.items() if v[2]}
    assert tree.persistent == len(persistent) and tree.ephemeral == len(ephemeral)

    def under(prefix: str) -> dict[str, tuple[bytes, int, bool]]:
        return {p: v for p, v in persistent.items() if p.startswith(prefix)}

    assert under("/admin/clusters/")
    for path, (value, _, _) in under("/admin/policies/").items():
        assert isinstance(json.loads(value), dict), path
    partitioned = {p: v for p, v in under("/admin/partitioned-topics/").items() if p.count("/") == 6}
    assert partitioned
    for value, _, _ in partitioned.values():
        assert json.loads(value)["partitions"] >= 2
    assert under("/admin/local-policies/") and under("/schemas/")
    managed = under("/managed-ledgers/")
    versions = [version for _, version, _ in managed.values()]
    assert min(versions) == 0 and max(versions) >= 1000  # "from 0 into the thousands"
    cursors = {p: v for p, v in managed.items() if re.search(r"/persistent/[^/]+/[^/]+$", p)}
    assert cursors and max(len(v[0]) for v in cursors.values()) >= 10_000  # tens of KB
    assert any(b"\x00" in v[0] or max(v[0], default=0) > 127 for v in managed.values())  # binary
    ledgers = [p for p in persistent if re.fullmatch(r"/ledgers/\d{2}/\d{4}/L\d{4}", p)]
    assert ledgers
    # the id generator moved past every ledger id in the tree, as BookKeeper's does
    highest = max(int(p[9:11] + p[12:16] + p[18:22]) for p in ledgers)
    assert await store.sequence_counter("/ledgers/idgen") > highest
    assert await store.sequence_counter("/counters/producer-name") > 0
    # live ephemerals: broker and bookie registrations, leader, bundle ownership
    assert any(p.startswith("/loadbalance/brokers/") for p in ephemeral)
    assert any(p.startswith("/ledgers/available/") for p in ephemeral)
    assert "/loadbalance/leader" in ephemeral
    assert any(p.startswith("/namespace/") for p in ephemeral)
