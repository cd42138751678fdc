"""The bulk copy and its verification, on real servers and real Spark (local mode), for every
pair of stores: bytes and versions equal, ephemerals and excluded subtrees left out, counters
carried, idempotent, resumable after a kill, conflicts and hand-made changes caught."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from metashift.copy import ledger_ids
from metashift.copy.rules import Rules
from metashift.spark.copy import copy_tree
from metashift.spark.report import CopyConflict
from metashift.spark.verify import verify_tree
from metashift.stores import Restore, Store, open_store, paths
from metashift.stores.sequence_floors import floors_root, read_floor
from metashift_lab.sample_tree import generate
from tests.copy_support import snapshot
from tests.ledger_id_generators import PulsarLedgerIdGenerator
from tests.oxia_raw import raw_record

PAIRS = [("zk", "etcd"), ("etcd", "zk"), ("zk", "zk"), ("etcd", "etcd"),
         ("zk", "oxia"), ("etcd", "oxia"), ("oxia", "zk"), ("oxia", "etcd"), ("oxia", "oxia")]
TOPICS = 25
RULES = Rules()


def url_of(request: pytest.FixtureRequest, backend: str, namespace: str, side: str) -> str:
    server = request.getfixturevalue(f"{backend}_server")
    return f"{server.url}{namespace}-{side}"


async def fill(store: Store) -> None:
    """A small Pulsar tree with live ephemerals, plus what the copy must leave out and a few
    nodes with high versions and a large value."""
    await generate(store, TOPICS, seed=7)
    await store.restore("/pulsar/migration-coordinator/migration", b'{"phase":"COPYING"}', 3)
    await store.put("/pulsar/migration-coordinator/participants/id-", b"me", ephemeral=True, sequential=True)
    await store.restore("/zookeeper/quota", b"q", 1)
    await store.restore("/managed-ledgers/hot", os.urandom(50_000), 300)
    await store.restore("/counters/other", b"", 0)
    await store.advance_sequence_counter("/counters/other", 37)


@pytest.fixture
async def pair(request: pytest.FixtureRequest, namespace: str) -> AsyncIterator[tuple[str, str, Store]]:
    """(source URL, target URL, the open source store holding the ephemerals)."""
    src_backend, tgt_backend = request.param
    source_url = url_of(request, src_backend, namespace, "src")
    target_url = url_of(request, tgt_backend, namespace, "dst")
    source = await open_store(source_url)
    await fill(source)
    yield source_url, target_url, source
    await source.close()


def _ids(p: tuple[str, str]) -> str:
    return f"{p[0]}-to-{p[1]}"


def is_floors(path: str) -> bool:
    """The floors of retired counters, and (ZooKeeper) their parents."""
    return paths.is_under(path, floors_root()) or paths.is_under(floors_root(), path)


async def check_copied(source: Store, target_url: str) -> None:
    src = await snapshot(source)
    async with await open_store(target_url) as target:
        dst = await snapshot(target)
        for path, (value, version, ephemeral) in src.items():
            if ephemeral or RULES.is_excluded(path):
                assert path not in dst or is_floors(path), path
                continue
            assert path in dst, path
            if not RULES.keeps_version(path):  # a ledger-id generator's node: on etcd its version is its counter
                assert dst[path][0] == value, path
            elif RULES.is_counter(path):
                assert dst[path][0] == value and dst[path][1] >= version, path
            else:
                assert dst[path][:2] == (value, version), path
        for path in dst:
            assert not RULES.is_excluded(path) or is_floors(path), path
            assert not dst[path][2], f"ephemeral {path} in the target"
        assert "/pulsar/migration-coordinator/migration" not in dst
        assert "/zookeeper/quota" not in dst
        assert not any(p.startswith("/loadbalance/brokers/") for p in dst)
        if source.url.scheme == "zk":  # BookKeeper's ids were created and deleted: cversion > next suffix
            idgen = "/ledgers/idgen"
            assert (await source.children_version(idgen) or 0) > await source.sequence_counter(idgen)
        await check_ledger_ids(source, target)
        if target_url.startswith("oxia://"):
            await check_oxia_records(src, target)
        # plain counters: the next sequential id in the target is past every id the source issued
        for parent in ("/counters/other", "/counters/producer-name"):
            issued = await source.sequence_counter(parent)
            assert issued > 0
            have = await target.sequence_counter(parent)
            assert have >= issued
            if target_url.startswith(("etcd://", "oxia://")):
                # the parent's version is the counter: the copy stops at the exact next suffix
                # (or the version the node itself needs), not at a ZooKeeper cversion, which also
                # counts deletions and would cost a write per deletion for nothing
                assert have == max(issued, src[parent][1] + 1), parent
            made = await target.put(parent + "/ID-", b"", ephemeral=True, sequential=True)
            assert int(made.path.rsplit("ID-", 1)[1]) >= issued
            await target.delete(made.path)


@pytest.mark.parametrize("pair", PAIRS, indirect=True, ids=_ids)
async def test_copy_is_exact_idempotent_and_verified(pair: tuple[str, str, Store], spark: Any) -> None:
    source_url, target_url, source = pair
    before = await snapshot(source)
    report = await asyncio.to_thread(copy_tree, source_url, target_url, verify=True, spark=spark)
    assert report.verify is not None and report.verify.ok, report.verify.text() if report.verify else None
    assert report.written == report.nodes > 100
    assert report.ephemerals_skipped >= 10
    if target_url.startswith("oxia://"):
        # one write per node whatever its version (Oxia's overrides), the counters a few writes
        assert report.write_ops - report.counter_writes == report.written, report.text()
        assert report.counter_writes <= 8, report.counters
    else:
        assert report.write_amplification > 1
    # the executors listed the subtrees below the driver's top levels
    assert report.listed_by_executors > 0 and report.verify.listed_by_executors > 0
    await check_copied(source, target_url)
    assert await snapshot(source) == before, "the copy changed the source"

    again = await asyncio.to_thread(copy_tree, source_url, target_url, spark=spark)
    assert again.written == 0 and again.write_ops == 0
    assert again.unchanged == report.nodes


@pytest.mark.parametrize("pair", [("zk", "etcd"), ("etcd", "zk")], indirect=True, ids=_ids)
async def test_conflict_fails_and_names_the_path(pair: tuple[str, str, Store], spark: Any) -> None:
    source_url, target_url, _ = pair
    await asyncio.to_thread(copy_tree, source_url, target_url, spark=spark)
    path = "/admin/clusters/us-east"
    async with await open_store(target_url) as target:
        got = await target.get(path)
        assert got is not None
        await target.put(path, got[0], expected_version=got[1].version)  # now ahead of the source
    with pytest.raises(CopyConflict) as info:
        await asyncio.to_thread(copy_tree, source_url, target_url, spark=spark)
    assert info.value.path == path
    assert path in str(info.value) and "ahead" in str(info.value)


@pytest.mark.parametrize("pair", [("zk", "etcd")], indirect=True, ids=_ids)
async def test_every_conflict_is_named_on_the_command_line(
    pair: tuple[str, str, Store], spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    source_url, target_url, _ = pair
    await asyncio.to_thread(copy_tree, source_url, target_url, spark=spark)
    ahead = ["/admin/clusters/us-east", "/admin/clusters/us-west"]
    async with await open_store(target_url) as target:
        for path in ahead:
            got = await target.get(path)
            assert got is not None, path
            await target.put(path, got[0], expected_version=got[1].version)
    from metashift.cli import main

    code = await asyncio.to_thread(main, ["copy", "--source", source_url, "--target", target_url])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    for path in ahead:
        assert any(line.startswith(f"conflict: {path}: ") and "ahead" in line for line in err), err
    assert err[-1].startswith("metashift: error: conflict in the target") and "1 more" in err[-1]


@pytest.mark.parametrize("pair", [("zk", "etcd"), ("etcd", "zk")], indirect=True, ids=_ids)
async def test_verify_catches_changes_made_by_hand(pair: tuple[str, str, Store], spark: Any) -> None:
    source_url, target_url, _ = pair
    await asyncio.to_thread(copy_tree, source_url, target_url, spark=spark)
    value_path, version_path, gone_path = "/admin/configuration", "/ledgers/LAYOUT", "/admin/clusters/us-west"
    async with await open_store(target_url) as target:
        got = await target.get(value_path)
        assert got is not None
        await target.delete(value_path)  # same version, other bytes
        await target.restore(value_path, got[0] + b" ", got[1].version)
        got = await target.get(version_path)
        assert got is not None
        await target.put(version_path, got[0])  # same bytes, version + 1
        await target.delete(gone_path + "/failureDomain/domain-a")
        await target.put("/admin/extra", b"only here")
    report = await asyncio.to_thread(verify_tree, source_url, target_url, spark=spark)
    assert not report.ok
    kinds = {(m.path, m.kind) for m in report.mismatches}
    assert kinds == {
        (value_path, "value"),
        (version_path, "version"),
        (gone_path + "/failureDomain/domain-a", "missing"),
        ("/admin/extra", "extra"),
    }, report.text()


@pytest.mark.parametrize("pair", [("zk", "etcd"), ("etcd", "zk")], indirect=True, ids=_ids)
async def test_killed_half_way_then_run_again_ends_equal(pair: tuple[str, str, Store], spark: Any) -> None:
    source_url, target_url, source = pair
    await generate_more(source)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "metashift.cli", "copy", "--source", source_url, "--target", target_url, "--json"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True
    )
    landed = 0
    try:
        async with await open_store(target_url) as target:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.returncode is None:
                landed = sum([len(page) async for page in target.walk()])
                if landed >= 200:
                    break
                await asyncio.sleep(0.05)
    finally:
        still_running = proc.returncode is None
        os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 30)
    assert still_running and landed >= 200, "the copy ended before it could be killed half-way"
    partial = await asyncio.to_thread(verify_tree, source_url, target_url, spark=spark)
    assert not partial.ok  # the kill left the target incomplete
    report = await asyncio.to_thread(copy_tree, source_url, target_url, verify=True, spark=spark)
    assert report.verify is not None and report.verify.ok, report.verify.text() if report.verify else None
    assert 0 < report.written < report.nodes
    await check_copied(source, target_url)


async def check_oxia_records(src: dict[str, tuple[bytes, int, bool]], target: Store) -> None:
    """A record copied into Oxia carries the source's version as both its ``version_id`` (what
    Pulsar's own store calls the version) and its ``modifications_count`` (metashift's)."""
    checked = 0
    for path, (_, version, ephemeral) in src.items():
        if ephemeral or RULES.is_excluded(path) or RULES.is_counter(path):
            continue
        raw = await raw_record(target, path)
        assert (raw.version.version_id, raw.version.modifications_count) == (version, version), path
        checked += 1
    assert checked > 100


async def check_ledger_ids(source: Store, target: Store) -> None:
    """The ledger-id generator jumped: Pulsar's generator reading the target hands out ids above
    every id the source handed out (it takes the new, largest HOB- node), in a handful of writes;
    every counter the jump retired has a floor at or past the source's. Into Oxia, whose counters
    move in one write, each counter was carried exactly instead: the ids go on from the source's."""
    source_hobs = await ledger_ids.hobs(source, "/ledgers")
    bound = await ledger_ids.issued_bound(source, "/ledgers")
    assert bound > 1 << 32  # the sample tree's generator went past 2^31 ids
    if target.url.scheme == "oxia":
        assert await ledger_ids.hobs(target, "/ledgers") == source_hobs
        issued = [await PulsarLedgerIdGenerator(target).generate_ledger_id() for _ in range(3)]
        assert issued == [bound, bound + 1, bound + 2], (issued, bound)
        assert await read_floor(target, "/ledgers/idgen") is None
        return
    assert await ledger_ids.hobs(target, "/ledgers") == [*source_hobs, source_hobs[-1] + 1]
    issued = [await PulsarLedgerIdGenerator(target).generate_ledger_id() for _ in range(3)]
    assert issued == sorted(set(issued)) and issued[0] >= (source_hobs[-1] + 1) << 32 > bound, issued
    for parent in ("/ledgers/idgen", f"/ledgers/idgen-long/HOB-{source_hobs[-1]:010d}"):
        floor = await read_floor(target, parent)
        assert floor is not None and floor >= await source.sequence_counter(parent) > 0, parent


async def generate_more(store: Store) -> None:
    """More nodes with long version chains, so that a copy takes long enough to be killed."""
    items = [Restore(f"/managed-ledgers/bulk/n-{i:05d}", b"v" * 100, 40) for i in range(1500)]
    await store.put("/managed-ledgers/bulk", b"", -1)
    for i in range(0, len(items), 500):
        await store.restore_many(items[i : i + 500])


@pytest.mark.parametrize("pair", [("zk", "etcd")], indirect=True, ids=_ids)
async def test_tight_etcd_limits(
    pair: tuple[str, str, Store], spark: Any, fresh_servers: Any, namespace: str
) -> None:
    """A target etcd with far lower txn-op and request-size limits than the defaults."""
    source_url, _, source = pair
    etcd = fresh_servers.etcd(max_txn_ops=5, max_request_bytes=200_000)
    target_url = etcd.url + namespace
    report = await asyncio.to_thread(copy_tree, source_url, target_url, verify=True, spark=spark)
    assert report.verify is not None and report.verify.ok, report.verify.text() if report.verify else None
    await check_copied(source, target_url)


@pytest.mark.parametrize("pair", [("zk", "etcd")], indirect=True, ids=_ids)
async def test_etcd_history_compacted_during_the_copy(pair: tuple[str, str, Store], spark: Any) -> None:
    """Replaying versions leaves history that etcd counts against its quota: the copy compacts it
    each time the target's backend has grown by ``compact_every_bytes``, not only at the end, and
    the result is still exact."""
    source_url, target_url, source = pair
    report = await asyncio.to_thread(
        copy_tree, source_url, target_url, verify=True, spark=spark, compact_every_bytes=16 * 1024
    )
    assert report.verify is not None and report.verify.ok, report.verify.text() if report.verify else None
    assert report.write_ops > 3 * 1000
    assert report.compactions >= 2  # at least once during the copy, and once more after the counters
    await check_copied(source, target_url)
