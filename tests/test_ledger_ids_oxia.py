"""BookKeeper's ledger-id generator into and out of Oxia, where a counter is the parent's
``modifications_count`` and moves in one write: into Oxia each of the generator's counters is
carried exactly (no jump, no floor), one write each whatever the number of ids; Oxia's own client
(its Go library, through its CLI) is handed the id the carry promised, as Pulsar's
``OxiaMetadataStore`` would name it; out of Oxia a generator that handed out two billion ids is
carried into ZooKeeper by ``metashift copy --verify`` in a handful of writes. Pulsar's generator
over Pulsar's ``OxiaMetadataStore`` is modelled on the raw records (``tests/ledger_id_generators.py``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from metashift.copy import counters, ledger_ids
from metashift.copy.rules import Rules
from metashift.stores import open_store
from metashift.stores.oxia.keys import Keys as OxiaKeys
from metashift.stores.sequence_floors import floored_parents
from metashift_lab.servers import oxia_binary
from tests.copy_support import store_pair
from tests.ledger_id_generators import HOB_1, LAYOUT_HIERARCHICAL, ROOT, issue_ids

RULES = Rules()


@pytest.mark.parametrize("direction", ["zk-to-oxia", "etcd-to-oxia"])
async def test_into_oxia_each_counter_is_carried_exactly_in_one_write(
    request: pytest.FixtureRequest, namespace: str, direction: str
) -> None:
    """Into Oxia a counter moves in one write (the modifications-count override), so the
    generator is not jumped: each of its counters (``R/idgen``, every ``HOB-`` node) is raised to
    exactly the source's next id, one write each however many ids it handed out (ten or a hundred
    times more), as each node is copied; Pulsar's generator reading Oxia goes on
    from the source's next id, with no floor and no new ``HOB-`` node."""
    writes = []
    # (making the source's ids: a write per step on ZooKeeper and etcd, etcd's the slower)
    for size in (1_000, 100_000 if direction.startswith("zk") else 10_000):
        source, target = await store_pair(request, namespace, direction, f"-{size}")
        try:
            await source.restore("/ledgers/LAYOUT", LAYOUT_HIERARCHICAL, 0)
            short = await issue_ids(source, 2)
            await source.advance_sequence_counter("/ledgers/idgen", size)
            short += await issue_ids(source, 1)
            await source.put("/ledgers/idgen-long", b"")
            long = await issue_ids(source, 2)  # HOB-0000000001 made by the generator
            await source.put("/ledgers/idgen-long/HOB-0000000002", b"")
            await source.advance_sequence_counter("/ledgers/idgen-long/HOB-0000000002", size)
            long += await issue_ids(source, 1)
            assert long[-1] == (2 << 32) | size and short[-1] == size
            carried: dict[str, counters.CounterCarry] = {}
            for node in await ledger_ids.counters(source, ROOT):  # as the copy puts each in place
                carried.update(await counters.carry(source, target, node, RULES))
            assert {p: (c.carried, c.target, c.writes) for p, c in carried.items()} == {
                "/ledgers/idgen": ("exact", size + 1, 1),
                "/ledgers/idgen-long/HOB-0000000001": ("exact", await source.sequence_counter(HOB_1), 1),
                "/ledgers/idgen-long/HOB-0000000002": ("exact", size + 1, 1)}
            assert await counters.carry(source, target, "/ledgers/idgen-long", RULES) == {}  # not a counter
            writes.append(sum(c.writes for c in carried.values()))
            assert await ledger_ids.hobs(target, ROOT) == [1, 2]
            assert await floored_parents(target) == set()
            bound = await ledger_ids.issued_bound(source, ROOT)
            states = await counters.check(source, target, "/ledgers/idgen", RULES)
            assert states["/ledgers/idgen-long"].ok and states["/ledgers/idgen-long"].target == bound, states
            assert states["/ledgers/idgen"].ok and states["/ledgers/idgen"].carried == "exact", states
            assert await issue_ids(target, 3) == [bound, bound + 1, bound + 2] and bound == long[-1] + 1
            again = {p: c for node in await ledger_ids.counters(source, ROOT)
                     for p, c in (await counters.carry(source, target, node, RULES)).items()}  # fmt: skip
            assert sum(c.writes for c in again.values()) == 0  # idempotent
        finally:
            await source.close()
            await target.close()
    assert writes == [3, 3], writes


async def test_oxias_own_client_is_handed_the_id_the_carry_promised(
    request: pytest.FixtureRequest, namespace: str, oxia_server: Any
) -> None:
    """Pulsar's store on Oxia names a sequential child after the ``modificationsCount`` Oxia's
    client returns for a blind put of empty bytes on the parent. After a carry into Oxia, Oxia's
    own client (its Go library, through its CLI) makes that put on the counter the generator reads
    and is handed the id ``next_id`` promised: the source's next one."""
    source, target = await store_pair(request, namespace, "zk-to-oxia")
    try:
        await source.restore("/ledgers/LAYOUT", LAYOUT_HIERARCHICAL, 0)
        await source.advance_sequence_counter("/ledgers/idgen", 70_000)
        issued = await issue_ids(source, 3)
        await counters.carry(source, target, "/ledgers/idgen", RULES)
        promised = await ledger_ids.next_id(target, ROOT)
        assert await ledger_ids.live_counter(target, ROOT) == "/ledgers/idgen"
        assert promised == max(issued) + 1
        binary = oxia_binary()
        assert binary is not None
        key = OxiaKeys(target.url.root).key("/ledgers/idgen")
        done = await asyncio.to_thread(subprocess.run, [binary, "client", "-a", oxia_server.address,
                                                        "--log-level", "warn", "put", key, ""],
                                       capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        assert json.loads(done.stdout)["modifications_count"] == promised, (done.stdout, promised)
        assert await issue_ids(target, 1) == [promised + 1]  # Pulsar's generator goes on from there
    finally:
        await source.close()
        await target.close()


async def test_copy_and_verify_out_of_oxia_of_two_billion_ids(
    oxia_url: str, zk_url: str, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Out of Oxia, where a counter is the parent's count of writes (made in one write however
    large): ``metashift copy --verify`` into ZooKeeper carries a generator that handed out two
    billion short ids in the same few writes, and every id handed out on ZooKeeper afterwards is
    above every id Oxia handed out."""
    from metashift.cli import main

    ids = 2_000_000_000
    assert await asyncio.to_thread(
        main, ["generate", "--target", oxia_url, "--topics", "20", "--ledger-ids", str(ids), "--no-ephemerals",
               "--producer-names", "3000", "--json"]) == 0  # fmt: skip
    made = json.loads(capsys.readouterr().out)
    assert made["counters"]["/ledgers/idgen"] == ids and made["counter_writes"] <= 10, made
    assert await asyncio.to_thread(
        main, ["copy", "--source", oxia_url, "--target", zk_url, "--json", "--verify", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_path = report["counters"]
    assert by_path["/ledgers/idgen-long"]["carried"] == "jump"
    assert by_path["/ledgers/idgen-long"]["target"] == 2 << 32 > by_path["/ledgers/idgen-long"]["source"]
    assert (by_path["/ledgers/idgen"]["carried"], by_path["/ledgers/idgen"]["target"]) == ("floor", ids)
    assert sum(c["writes"] for p, c in by_path.items() if p.startswith("/ledgers/")) <= 7, by_path
    assert by_path["/counters/producer-name"]["target"] == 3000
    assert report["verify"]["ok"], report["verify"]
    assert await asyncio.to_thread(main, ["verify", "--source", oxia_url, "--target", zk_url, "--json",
                                          "--no-progress"]) == 0  # fmt: skip
    checks = json.loads(capsys.readouterr().out)["counter_checks"]
    assert checks["/ledgers/idgen"] == {"scheme": "ledger-ids", "carried": "floor", "source": ids, "target": ids,
                                        "ok": True}  # fmt: skip
    async with await open_store(oxia_url) as source, await open_store(zk_url) as target:
        bound = await ledger_ids.issued_bound(source, ROOT)
        after = await issue_ids(target, 3)
        assert min(after) >= bound and after == sorted(set(after))
