"""BookKeeper's ledger-id generator across a copy, on real ZooKeeper, etcd and Oxia: read as Pulsar's
generator reads it, carried by a jump in the same few writes whatever the number of ids it handed
out, its retired counters floored, plain counters carried exactly, the freeze's delta O(1) too,
and the promise checked: every id handed out on the target after the copy (by Pulsar's generator
logic, ``tests/ledger_id_generators.py``; on Oxia over Pulsar's ``OxiaMetadataStore`` modelled on
the raw records) is above every id the source handed out. Into Oxia, where each counter is carried
exactly in one write, and out of it: ``tests/test_ledger_ids_oxia.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from metashift.agent.core.sequence_floors import floor_carried_sequentials
from metashift.copy import counters, ledger_ids
from metashift.copy.delta import carry as delta_carry
from metashift.copy.delta import check as delta_check
from metashift.copy.rules import Rules
from metashift.stores import Store, open_store
from metashift.stores.sequence_floors import floor_path, floored_parents, raise_floor, read_floor, take_from_floor
from tests.copy_support import store_pair
from tests.harness import Gateways
from tests.ledger_id_generators import (
    LAYOUT_HIERARCHICAL,
    LAYOUT_LEGACY,
    ROOT,
    KazooLongLedgerIdGenerator,
    issue_ids,
)

RULES = Rules()


@pytest.fixture(params=["zk", "etcd", "oxia"])
async def store(request: pytest.FixtureRequest, namespace: str) -> AsyncIterator[Store]:
    server = request.getfixturevalue(f"{request.param}_server")
    async with await open_store(server.url + namespace) as s:
        yield s


# ---- floors ---------------------------------------------------------------------------------------


async def test_floors_hand_out_distinct_ids_from_their_next_one_up(store: Store) -> None:
    assert await read_floor(store, "/ledgers/idgen") is None
    assert await take_from_floor(store, "/ledgers/idgen") is None
    assert await raise_floor(store, "/ledgers/idgen", 1000) >= 1  # (ZooKeeper: its parents too)
    assert await raise_floor(store, "/ledgers/idgen", 400) == 0  # a floor never goes down
    taken = await asyncio.gather(*(take_from_floor(store, "/ledgers/idgen") for _ in range(40)))
    assert sorted(t for t in taken if t is not None) == list(range(1000, 1040))
    assert await read_floor(store, "/ledgers/idgen") == 1040
    assert await raise_floor(store, "/ledgers/idgen", 5000) == 1
    assert await take_from_floor(store, "/ledgers/idgen") == 5000
    assert await floored_parents(store) == {"/ledgers/idgen"}


async def test_a_carried_lock_queue_gets_a_floor_a_carried_counter_none(store: Store) -> None:
    """At the switch an agent floors the parents of the sequential names it carried (a lock
    queue's holder) only where the target's own counter is not above them already: a counter the
    copy carried (a broker's ephemeral under Pulsar's producer-name counter, a ledger-id node in
    flight) gets none, or the floor and the counter would hand out the same numbers."""
    await store.advance_sequence_counter("/counters/producer-name", 43)  # as the copy carried it
    carried = ["/counters/producer-name/-0000000042", "/locks/queue/x__lock__0000000057", "/loadbalance/brokers/b:8080"]
    for path in carried:
        await store.put(path, b"", ephemeral=True)
    assert await floor_carried_sequentials(store, carried) >= 1
    assert await floored_parents(store) == {"/locks/queue"}
    assert await read_floor(store, "/locks/queue") == 58
    assert await floor_carried_sequentials(store, carried) == 0  # nothing more to do


# ---- reading the generator as Pulsar does ------------------------------------------------------------


async def test_next_id_is_the_one_pulsars_generator_hands_out(store: Store) -> None:
    """Whatever state the generator is in (never used, short ids, long ids without and with
    HOB- nodes, names the generator does not parse), ``next_id`` is the id Pulsar's generator
    hands out next (or, where it must first create a HOB- node, at most that id)."""
    assert await ledger_ids.next_id(store, ROOT) == 0
    # the generator makes R/idgen first (on etcd that put is its counter's first step)
    assert (await issue_ids(store, 1))[0] == (0 if store.url.scheme == "zk" else 1)
    for _ in range(3):
        want = await ledger_ids.next_id(store, ROOT)
        assert (await issue_ids(store, 1))[0] == want
    await store.advance_sequence_counter("/ledgers/idgen", 5_000)
    assert await ledger_ids.next_id(store, ROOT) == 5_000 == (await issue_ids(store, 1))[0]
    await store.put("/ledgers/idgen-long", b"")  # the switch to 63-bit ids, no HOB- node yet
    assert await ledger_ids.next_id(store, ROOT) == 1 << 32
    first_long = (await issue_ids(store, 1))[0]
    assert first_long >> 32 == 1 and first_long >= 1 << 32
    for name in ("HOB-0000000007", "HOB-x", "bogus", "HOB-3"):
        await store.put(f"/ledgers/idgen-long/{name}", b"")
    await store.advance_sequence_counter("/ledgers/idgen-long/HOB-0000000007", 12)
    for _ in range(2):
        want = await ledger_ids.next_id(store, ROOT)
        assert want >> 32 == 7
        assert (await issue_ids(store, 1))[0] == want
    assert await ledger_ids.live_counter(store, ROOT) == "/ledgers/idgen-long/HOB-0000000007"
    assert await ledger_ids.hobs(store, ROOT) == [1, 3, 7]


# ---- the carry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["zk-to-etcd", "etcd-to-zk", "oxia-to-zk", "oxia-to-etcd"])
async def test_generator_carried_in_the_same_writes_whatever_its_ids(
    request: pytest.FixtureRequest, namespace: str, direction: str
) -> None:
    """The same generator at two sizes (ten or a hundred times more ids): the carry writes exactly as much
    for both, and Pulsar's generator reading each target hands out ids above every id its source
    handed out; the retired short counter has a floor at the source's next id."""
    # (raising a counter: a write per step on ZooKeeper and etcd, one write on Oxia: a billion ids)
    sizes = {"zk": (1_000, 100_000), "etcd": (1_000, 10_000), "oxia": (1_000, 10**9)}[direction.split("-")[0]]
    writes = []
    for size in sizes:
        source, target = await store_pair(request, namespace, direction, f"-{size}")
        try:
            await source.restore("/ledgers/LAYOUT", LAYOUT_HIERARCHICAL, 0)
            before = await issue_ids(source, 3)
            await source.advance_sequence_counter("/ledgers/idgen", size)
            before += await issue_ids(source, 2)
            assert before[-1] == size + 1
            carried = await counters.carry(source, target, "/ledgers/idgen", RULES)
            assert set(carried) == {"/ledgers/idgen-long", "/ledgers/idgen"}
            jump, floor = carried["/ledgers/idgen-long"], carried["/ledgers/idgen"]
            assert (jump.carried, jump.source, jump.target_before) == ("jump", size + 2, 0)
            assert jump.target >= 1 << 32
            assert (floor.carried, floor.source, floor.target) == ("floor", size + 2, size + 2)
            writes.append(sum(c.writes for c in carried.values()))
            after = await issue_ids(target, 5)
            assert after == sorted(set(after)) and after[0] >= 1 << 32 > max(before)
            assert await read_floor(target, "/ledgers/idgen") == size + 2
            states = await counters.check(source, target, "/ledgers/idgen", RULES)
            assert all(s.ok for s in states.values()), states
            again = await counters.carry(source, target, "/ledgers/idgen", RULES)  # idempotent
            assert sum(c.writes for c in again.values()) == 0
        finally:
            await source.close()
            await target.close()
    assert writes[0] == writes[1] <= 7, writes  # (ZooKeeper: a floor's three parents made too)


@pytest.mark.parametrize("direction", ["zk-to-etcd", "etcd-to-zk", "oxia-to-etcd"])
async def test_long_ids_jump_to_a_new_hob_and_retire_the_old_ones(
    request: pytest.FixtureRequest, namespace: str, direction: str
) -> None:
    source, target = await store_pair(request, namespace, direction)
    try:
        await source.put("/ledgers/idgen-long", b"")
        ids = await issue_ids(source, 2)  # HOB-0000000001 made by the generator
        await source.put("/ledgers/idgen-long/HOB-0000000004", b"")
        await source.advance_sequence_counter("/ledgers/idgen-long/HOB-0000000004", 9_000)
        ids += await issue_ids(source, 3)
        assert ids[-1] == (4 << 32) | 9_002
        carried = await counters.carry(source, target, "/ledgers/idgen-long/HOB-0000000001", RULES)
        assert carried["/ledgers/idgen-long"].carried == "jump"
        assert await ledger_ids.hobs(target, ROOT) == [5]
        assert carried["/ledgers/idgen-long/HOB-0000000004"].target == 9_003
        assert await read_floor(target, "/ledgers/idgen-long/HOB-0000000001") == await source.sequence_counter(
            "/ledgers/idgen-long/HOB-0000000001")  # fmt: skip
        after = await issue_ids(target, 3)
        assert after[0] >> 32 == 5 and min(after) > max(ids)
        # the source went on handing out ids (SYNCING): the same carry again raises the floors only
        ids += await issue_ids(source, 4)
        again = await counters.carry(source, target, "/ledgers/idgen-long", RULES)
        assert again["/ledgers/idgen-long"].carried == "none"
        assert again["/ledgers/idgen-long/HOB-0000000004"].target == 9_007
        assert sum(c.writes for c in again.values()) == 1
    finally:
        await source.close()
        await target.close()


async def test_a_plain_counter_keeps_its_exact_carry(request: pytest.FixtureRequest, namespace: str) -> None:
    """A plain sequential parent (Pulsar's producer-name counter) has no room to jump: the
    target's own counter is raised to exactly the source's next suffix, and the next sequential
    child there (Pulsar's etcd layout: the parent key's version; Oxia's: the parent's count of
    writes, moved in one write) is named after it."""
    for direction in ("zk-to-etcd", "etcd-to-zk", "zk-to-oxia", "oxia-to-zk"):
        source, target = await store_pair(request, namespace, direction, f"-{direction}")
        try:
            await source.put("/counters/producer-name", b"")
            await source.advance_sequence_counter("/counters/producer-name", 4_321)
            (carry,) = (await counters.carry(source, target, "/counters/producer-name", RULES)).values()
            assert (carry.scheme, carry.carried, carry.source, carry.target) == ("sequential", "exact", 4321, 4321)
            if target.url.scheme == "oxia":
                assert carry.writes == 1
            assert await target.sequence_counter("/counters/producer-name") == 4321
            made = await target.put("/counters/producer-name/p-", b"", sequential=True)
            assert int(made.path.rsplit("p-", 1)[1]) == 4321, made.path
            assert await read_floor(target, "/counters/producer-name") is None
        finally:
            await source.close()
            await target.close()


async def test_a_31_bit_layout_keeps_the_exact_carry(request: pytest.FixtureRequest, namespace: str) -> None:
    """BookKeeper's legacy hierarchical ledger manager hands out 31-bit ids only (R/LAYOUT says
    so): no jump to long ids, the short counter is carried exactly."""
    source, target = await store_pair(request, namespace, "zk-to-etcd")
    try:
        await source.restore("/ledgers/LAYOUT", LAYOUT_LEGACY, 0)
        await source.put("/ledgers/idgen", b"")
        await source.advance_sequence_counter("/ledgers/idgen", 3_000)
        carried = await counters.carry(source, target, "/ledgers/idgen", RULES)
        assert {p: (c.carried, c.target) for p, c in carried.items()} == {"/ledgers/idgen": ("exact", 3000)}
        assert not await target.exists("/ledgers/idgen-long")
        assert await issue_ids(target, 1) == [3000]
    finally:
        await source.close()
        await target.close()


async def test_the_freezes_delta_carries_a_generator_in_the_same_writes(
    request: pytest.FixtureRequest, namespace: str
) -> None:
    """Ids handed out while writes flowed (a thousand, or fifty thousand): the last delta
    raises the retired counter's floor in one write, and checks the promise."""
    source, target = await store_pair(request, namespace, "zk-to-etcd")
    try:
        await source.restore("/ledgers/LAYOUT", LAYOUT_HIERARCHICAL, 0)
        await issue_ids(source, 1)
        await counters.carry(source, target, "/ledgers/idgen", RULES)
        writes = []
        for more in (1_000, 50_000):
            at = await source.sequence_counter("/ledgers/idgen")
            await source.advance_sequence_counter("/ledgers/idgen", at + more)
            issued = await issue_ids(source, 1)
            # what the change tracker saw: every id's node, made and deleted (and a node beside)
            changed = {f"/ledgers/idgen/ID-{i:010d}" for i in range(at, issued[0] + 1)} | {"/ledgers/LAYOUT"}
            report = await delta_carry(source, target, changed, RULES)
            writes.append(report.write_ops - report.written)
            assert report.paths == 1  # the ids' nodes are not read back one by one
            assert report.counters["/ledgers/idgen"].target == issued[0] + 1
            states: dict[str, counters.CounterCheck] = {}
            assert await delta_check(source, target, changed, RULES, states) == []
            assert states["/ledgers/idgen-long"].ok and states["/ledgers/idgen"].target == issued[0] + 1
        assert writes == [1, 1]
    finally:
        await source.close()
        await target.close()


async def test_the_check_catches_a_counter_gone_back(request: pytest.FixtureRequest, namespace: str) -> None:
    source, target = await store_pair(request, namespace, "zk-to-etcd")
    try:
        await issue_ids(source, 5)
        await counters.carry(source, target, "/ledgers/idgen", RULES)
        await target.delete(floor_path("/ledgers/idgen"))
        await target.delete("/ledgers/idgen-long")  # (etcd: its HOB- key stays, but the generator looks no further)
        states = await counters.check(source, target, "/ledgers/idgen", RULES)
        assert not states["/ledgers/idgen-long"].ok  # back to short ids: 0 in the target
        assert (states["/ledgers/idgen"].source, states["/ledgers/idgen"].target) == (5, 0)
        assert counters.mismatch("/ledgers/idgen", states["/ledgers/idgen"]) == (
            "/ledgers/idgen", "counter", "next sequential suffix 0 in the target, 5 in the source")
    finally:
        await source.close()
        await target.close()


@pytest.mark.parametrize("direction", ["zk-to-etcd", "etcd-to-zk", "zk-to-oxia", "oxia-to-zk"])
async def test_through_the_agent_after_a_copy_ids_are_above_the_sources(
    request: pytest.FixtureRequest, namespace: str, gateways: Gateways, direction: str
) -> None:
    """An agent in front of the target after a copy: a BookKeeper generator that still takes short
    ids (what it cached before) gets them from the floor, through the ZooKeeper front (kazoo) and
    the gRPC gateway alike (in front of ZooKeeper too, where the front forwards other sequential
    creates for ZooKeeper to name); a fresh one takes long ids from the new HOB- node; none is reused."""
    source, target = await store_pair(request, namespace, direction)
    client = None
    try:
        issued = await issue_ids(source, 3)
        await source.advance_sequence_counter("/ledgers/idgen", 10_000)
        issued += await issue_ids(source, 1)
        await counters.carry(source, target, "/ledgers/idgen", RULES)
        agent = await gateways.start(target.url.unredacted(), {"zookeeper.listen": "127.0.0.1:0"})
        zk = await asyncio.to_thread(_kazoo, agent.zookeeper.address)
        try:
            stale, fresh = KazooLongLedgerIdGenerator(zk), KazooLongLedgerIdGenerator(zk)
            stale.status = False  # it read /ledgers/idgen-long before the copy made it: not there
            got = [await asyncio.to_thread(g.generate_ledger_id) for g in (stale, fresh, stale, fresh)]
        finally:
            await asyncio.to_thread(zk.stop)
        from metashift.client import connect

        client = await connect(agent.address)
        through_gateway = await client.put("/ledgers/idgen/ID-", b"", sequential=True)
        if direction.endswith("oxia"):  # carried exactly: both generators go on from the source's next id
            assert got == [10_001, 10_002, 10_003, 10_004], got
            assert through_gateway.path == "/ledgers/idgen/ID-0000010005"
        else:  # a jump: the stale generator takes its ids from the floor, the fresh one from the new HOB-
            assert got[0] == 10_001 and got[2] == 10_002, got
            assert got[1] >> 32 == 1 and got[3] == got[1] + 1, got
            # Pulsar's names: unpadded on etcd, ten digits on ZooKeeper
            assert through_gateway.path == ("/ledgers/idgen/ID-10003" if direction.endswith("etcd")
                                            else "/ledgers/idgen/ID-0000010003")
        assert not set(got) & set(issued) and min(got) > max(issued)
    finally:
        if client is not None:
            await client.close()
        await source.close()
        await target.close()


def _kazoo(hosts: str) -> Any:
    from kazoo.client import KazooClient

    k = KazooClient(hosts=hosts, timeout=10)
    k.start(timeout=15)
    return k


# ---- the copy of a generator that handed out 200,000 ids ------------------------------------------------


#: Ledger ids the generator hands out before the copy.
MANY_IDS = 200_000


async def test_copy_and_verify_of_many_ids_say_what_each_counter_took(
    zk_url: str, etcd_url: str, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``metashift generate --ledger-ids 200000``, then ``metashift copy --json --verify`` and
    ``metashift verify --json``: per counter, the source's next id, the target's, how it was
    carried, its writes; ids handed out on the target afterwards are above the source's. Enough
    ids that carrying them one by one would show (200,000 writes, against at most 4 for the
    generator); a million cost the suite two minutes of ZooKeeper writes and proved nothing more."""
    from metashift.cli import main

    assert await asyncio.to_thread(
        main, ["generate", "--target", zk_url, "--topics", "20", "--ledger-ids", str(MANY_IDS), "--no-ephemerals",
               "--producer-names", "3000", "--json"])  == 0  # fmt: skip
    made = json.loads(capsys.readouterr().out)
    assert made["counters"]["/ledgers/idgen"] == MANY_IDS and made["counter_writes"] >= 2 * MANY_IDS
    assert await asyncio.to_thread(
        main, ["copy", "--source", zk_url, "--target", etcd_url, "--json", "--verify", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_path = report["counters"]
    assert by_path["/ledgers/idgen-long"]["carried"] == "jump"
    assert by_path["/ledgers/idgen-long"]["target"] == (2 << 32) | 1 > by_path["/ledgers/idgen-long"]["source"]
    assert by_path["/ledgers/idgen"] | {"seconds": 0} == {
        "scheme": "ledger-ids", "carried": "floor", "source": MANY_IDS, "target_before": -1, "target": MANY_IDS,
        "writes": 1, "seconds": 0}  # fmt: skip
    assert by_path["/counters/producer-name"]["carried"] == "exact"
    assert by_path["/counters/producer-name"]["target"] == 3000
    generator_writes = sum(c["writes"] for p, c in by_path.items() if p.startswith("/ledgers/"))
    assert generator_writes <= 4 and report["counter_writes"] == generator_writes + by_path[
        "/counters/producer-name"]["writes"]  # fmt: skip
    assert report["verify"]["ok"] and report["verify"]["counter_checks"]["/ledgers/idgen-long"]["ok"]
    assert await asyncio.to_thread(main, ["verify", "--source", zk_url, "--target", etcd_url, "--json",
                                          "--no-progress"]) == 0  # fmt: skip
    checks = json.loads(capsys.readouterr().out)["counter_checks"]
    assert checks["/ledgers/idgen"] == {"scheme": "ledger-ids", "carried": "floor", "source": MANY_IDS,
                                        "target": MANY_IDS, "ok": True}  # fmt: skip
    async with await open_store(zk_url) as source, await open_store(etcd_url) as target:
        bound = await ledger_ids.issued_bound(source, ROOT)
        after = await issue_ids(target, 3)
        assert min(after) >= bound and after == sorted(set(after))
    # verified without the ledgers root: the jump's HOB- node is nobody's, an extra node
    assert await asyncio.to_thread(
        main, ["verify", "--source", zk_url, "--target", etcd_url, "--json", "--no-progress",
               "--ledgers-root", ""]) == 1  # fmt: skip
    mismatched = json.loads(capsys.readouterr().out)
    assert [(m["path"], m["kind"]) for m in mismatched["mismatches"]] == [
        ("/ledgers/idgen-long/HOB-0000000002", "extra")]


async def test_a_bad_ledgers_root_is_refused(capsys: pytest.CaptureFixture[str], zk_url: str, etcd_url: str) -> None:
    from metashift.cli import main

    code = await asyncio.to_thread(main, ["copy", "--source", zk_url, "--target", etcd_url, "--ledgers-root", "x/y"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metashift: error:") and "x/y" in err[0]
    async with await open_store(etcd_url) as target:
        assert await target.get_children("/") == []


def test_the_coordinators_counter_settings_are_stated_and_checked() -> None:
    from metashift.agent.config import ConfigError, build
    from metashift.copy.rules import configured_rules

    base = {"source.url": "zk://127.0.0.1:2181"}
    cfg = build({**base, "coordinator.ledgers_roots": ["/bk/ledgers", "/ledgers"], "coordinator.counters": []})
    rules = configured_rules(cfg.coordinator.ledgers_roots, cfg.coordinator.counters)
    assert rules.ledger_root_of("/bk/ledgers/idgen") == "/bk/ledgers" and not rules.is_counter("/counters/x")
    assert configured_rules(*[build(base).coordinator.ledgers_roots, None]) == Rules()
    from metashift.agent.config import load

    env = {"METASHIFT_SOURCE_URL": "zk://127.0.0.1:2181", "METASHIFT_COORDINATOR_LEDGERS_ROOTS": "/a/ledgers, /b"}
    assert load(env=env).coordinator.ledgers_roots == ("/a/ledgers", "/b")
    for bad in (["ledgers"], "/ledgers", [1]):
        with pytest.raises(ConfigError, match=r"coordinator\.ledgers_roots"):
            build({**base, "coordinator.ledgers_roots": bad})
