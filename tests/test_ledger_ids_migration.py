"""Ledger ids across a whole migration, both ways, beneath stock clients: BookKeeper's
``LongZkLedgerIdGenerator`` on kazoo through the agents' ZooKeeper front (a generator that read
the store before the switch keeps its caches: the existence of ``idgen-long``, its list of
``HOB-`` nodes), a fresh one through the front, and Pulsar's ``PulsarLedgerIdGenerator`` reading
the target directly (on Oxia, as Pulsar's ``OxiaMetadataStore`` names sequential children). Two
ledgers roots (the coordinator's ``ledgers_roots`` setting): one whose generator went past 2^31 ids
(``HOB-`` nodes), one still on short ids. Every id handed out after
the switch is new and above every id the source handed out (into Oxia the generators' counters are
carried exactly, so the ids go on from the source's, without a jump); a plain counter is carried
exactly; ``migrate status`` says what each counter's carry did."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kazoo.client import KazooClient

from metashift.coordinator import control
from metashift.copy import ledger_ids
from metashift.migration.phase import Phase
from metashift.stores import Store
from metashift_lab.sample_tree import generate
from tests.cluster import Cluster
from tests.harness import Gateways, eventually
from tests.ledger_id_generators import KazooLongLedgerIdGenerator, PulsarLedgerIdGenerator

pytestmark = pytest.mark.timeout(900)

ROOTS = ("/ledgers", "/bk2/ledgers")
LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:2\n"


@pytest.fixture
async def cluster(
    request: pytest.FixtureRequest, gateways: Gateways, namespace: str
) -> AsyncIterator[Cluster]:
    src, dst = request.param.split("-to-")
    source_url = request.getfixturevalue(f"{src}_server").url + namespace + "-src"
    target_url = request.getfixturevalue(f"{dst}_server").url + namespace + "-dst"
    c = Cluster(gateways, source_url, target_url)
    yield c
    await c.close()


async def _fill(source: Store, short_ids: int) -> None:
    """The sample tree (its generator under /ledgers went past 2^31: HOB-0000000001), and a
    second BookKeeper under /bk2/ledgers still on short ids."""
    await generate(source, 5, seed=3, ephemerals=False, ledger_ids=short_ids)
    await source.put("/bk2/ledgers/LAYOUT", LAYOUT)  # (ZooKeeper: its parents made too)
    await PulsarLedgerIdGenerator(source, "/bk2/ledgers").generate_ledger_id()
    await source.advance_sequence_counter("/bk2/ledgers/idgen", short_ids // 2)


def _kazoo(hosts: str) -> KazooClient:
    k = KazooClient(hosts=hosts, timeout=10)
    k.start(timeout=15)
    return k


#: Short ids the source's generator handed out: a write per id to make on ZooKeeper and etcd, one
#: write on Oxia (its counter moves by the modifications-count override).
SHORT_IDS = {"zk": 20_000, "etcd": 3_000, "oxia": 50_000_000}


@pytest.mark.parametrize("cluster", ["zk-to-etcd", "etcd-to-zk", "zk-to-oxia", "oxia-to-zk"], indirect=True)
async def test_ledger_ids_after_a_migration_are_above_every_id_the_source_handed_out(cluster: Cluster) -> None:
    source = await cluster.source()
    await _fill(source, SHORT_IDS[source.url.scheme])
    producer_names = await source.sequence_counter("/counters/producer-name")
    await cluster.start(brokers=2, bookies=1, settings={
        "zookeeper.listen": "127.0.0.1:0", "coordinator.ledgers_roots": list(ROOTS)})  # fmt: skip
    hosts = [agent.zookeeper.address for agent in cluster.agents.values()]
    clients = [await asyncio.to_thread(_kazoo, h) for h in hosts]
    try:
        # running bookies: each generator reads the store once, and keeps what it read
        stale = {root: KazooLongLedgerIdGenerator(clients[0], root) for root in ROOTS}
        before = {root: [await asyncio.to_thread(stale[root].generate_ledger_id) for _ in range(3)] for root in ROOTS}
        assert before["/ledgers"][0] >> 32 == 1 and before["/bk2/ledgers"][-1] < 2**31, before
        before["/ledgers"] += [await PulsarLedgerIdGenerator(source).generate_ledger_id()]
        # a bookie that keeps creating ledgers all through the migration (the copy's verification
        # meets the generators' counters moved since it copied them)
        during: dict[str, list[int]] = {root: [] for root in ROOTS}
        stop = asyncio.Event()

        async def busy_bookie() -> None:
            busy = {root: KazooLongLedgerIdGenerator(clients[1], root) for root in ROOTS}
            while not stop.is_set():
                for root in ROOTS:
                    during[root].append(await asyncio.to_thread(busy[root].generate_ledger_id))
                await asyncio.sleep(0.05)

        bookie = asyncio.ensure_future(busy_bookie())
        await control.start(source, cluster.target_url)
        status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
        stop.set()
        await asyncio.wait_for(bookie, 120)
        assert status["phase"] == "COMPLETED", status
        assert all(len(during[root]) > 3 for root in ROOTS), during
        await eventually(cluster.all_on_target, what="agents serve from the target")
        bound = {root: await ledger_ids.issued_bound(source, root) for root in ROOTS}
        assert all(max(before[root]) < bound[root] for root in ROOTS)

        target = await cluster.open(cluster.target_url)
        after: dict[str, list[int]] = {root: [] for root in ROOTS}
        for root in ROOTS:
            fresh = KazooLongLedgerIdGenerator(clients[1], root)
            for _ in range(3):  # the stale caches, a fresh client through the agent, Pulsar on the target
                after[root].append(await asyncio.to_thread(stale[root].generate_ledger_id))
                after[root].append(await asyncio.to_thread(fresh.generate_ledger_id))
                after[root].append(await PulsarLedgerIdGenerator(target, root).generate_ledger_id())
        for root in ROOTS:
            ids = after[root]
            assert min(ids) >= bound[root], (root, bound[root], ids)
            every = before[root] + during[root] + ids
            twice = sorted({i for i in every if every.count(i) > 1})
            assert not twice, (root, twice, before[root], during[root], ids)  # no id handed out twice, whoever took it
        counters = status["copy"]["counters"]
        if target.url.scheme == "oxia":
            # each counter carried exactly (one write each): stale and fresh generators alike go
            # on from the source's counters, the short-id one below 2^31, the other under HOB-1
            assert all(i < 2**31 for i in after["/bk2/ledgers"]), after
            assert all(i >> 32 == 1 for i in after["/ledgers"]), after
            for root in ROOTS:
                assert counters[f"{root}/idgen"]["carried"] == "exact", counters
                assert f"{root}/idgen-long" not in counters, counters
        else:
            # the stale generators still hand out from the counters they cached: their floors
            assert after["/bk2/ledgers"][0] < 2**31 <= after["/bk2/ledgers"][1]
            assert after["/ledgers"][0] >> 32 == 1 and after["/ledgers"][1] >> 32 == 2
            for root in ROOTS:
                assert counters[f"{root}/idgen-long"]["carried"] == "jump", counters
                assert counters[f"{root}/idgen"]["carried"] == "floor", counters
                assert counters[f"{root}/idgen-long"]["source"] == bound[root], counters
        # a plain counter: exactly the source's next suffix
        assert await target.sequence_counter("/counters/producer-name") == producer_names
        assert counters["/counters/producer-name"]["target"] == producer_names
    finally:
        for k in clients:
            await asyncio.to_thread(k.stop)
            await asyncio.to_thread(k.close)
