"""The way back (issue 17): after COMPLETED, a new migration from the store the cluster now lives
on, with the same agents and no restart, into the store it left (emptied by
``migrate start --clean-target``). zk -> etcd -> zk, etcd -> zk -> etcd and oxia -> zk -> oxia
(Oxia the store the cluster leaves, emptied for the way back, and the home an agent restarted
meanwhile follows the flag from), clients writing all along through in-process agents, real
servers and Spark."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from metashift.client import connect
from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.flag import read_flag
from metashift.migration.phase import Phase
from metashift.stores import open_store
from metashift_lab.sample_tree import generate
from tests.cluster import Cluster
from tests.harness import Gateways, eventually

pytestmark = pytest.mark.timeout(1500)


async def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``metashift ARGS`` as a process, without blocking the event loop the agents run on."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "metashift.cli", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 900)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(list(args), proc.returncode, out.decode(), err.decode())


async def _status(url: str) -> dict[str, Any]:
    async with await open_store(url, watch=False) as store:
        return (await control.status(store)).to_dict()


async def _wait(url: str, *phases: Phase, epoch: int) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def ended() -> bool:
        found.update(await _status(url))
        return found["epoch"] == epoch and found["phase"] in {p.value for p in phases}

    await eventually(ended, within=840, what=f"epoch {epoch} in {[p.value for p in phases]} in {url}")
    return found


#: BookKeeper's ledger-id generator: a sequence counter the copy carries (``spark.rules``).
LEDGER_IDS = "/ledgers/idgen/ID-"


async def _ledger_ids(cluster: Cluster, count: int) -> list[int]:
    """``count`` ledger ids handed out through an agent, as BookKeeper's generator takes them."""
    async with await connect(cluster.agents["broker-1"].address) as client:
        return [int((await client.put(LEDGER_IDS, b"", sequential=True)).path.rsplit("-", 1)[1])
                for _ in range(count)]


# zk -> etcd -> zk takes both directions between ZooKeeper and etcd (etcd -> zk -> etcd would again:
# test_migration_pairs.py starts from etcd), oxia -> zk -> oxia both between Oxia and ZooKeeper
@pytest.mark.parametrize("stores", ["zk-etcd", "oxia-zk"])
async def test_there_and_back_again_with_the_same_agents(gateways: Gateways, request: pytest.FixtureRequest,
                                                         stores: str) -> None:
    there, back = (str(request.getfixturevalue(f"{kind}_url")) for kind in stores.split("-"))
    cluster = Cluster(gateways, there, back)
    try:
        source = await cluster.source()
        await generate(source, 5, seed=3, ephemerals=False)
        await cluster.start(brokers=2, bookies=1)
        await cluster.start_writers()
        nodes = set(cluster.agents)

        issued = await _ledger_ids(cluster, 5)
        # there: the first migration
        assert (await control.start(source, back)).epoch == 1
        await _wait(there, Phase.COMPLETED, Phase.FAILED, epoch=1)
        assert (await _status(there))["phase"] == "COMPLETED"
        await eventually(cluster.all_on_target, within=60, what="agents serve from the target")
        await cluster.writes_continue()
        # the agents registered where they now serve; the old source says where they went
        now = await _status(back)
        assert now["phase"] == "NOT_STARTED" and now["origin"] == {"epoch": 1, "source": there}, now
        assert {p["node_id"] for p in now["participants"]} == nodes and all(p["alive"] for p in now["participants"])
        old = await _status(there)
        assert (old["phase"], old["lives_on"], old["participants"]) == ("COMPLETED", back, []), old
        refused = await _cli("migrate", "start", "--source", there, "--target", back)
        assert refused.returncode == 2 and "the cluster lives there now" in refused.stderr, refused.stderr
        refused = await _cli("migrate", "start", "--source", back, "--target", there)
        assert refused.returncode == 2 and "not empty" in refused.stderr and "--clean-target" in refused.stderr
        refused = await _cli("migrate", "start", "--source", back, "--target", there, "--clean-target")
        assert refused.returncode == 2 and "confirm with --yes" in refused.stderr, refused.stderr
        assert await source.get("/admin") is not None  # nothing removed without a confirmation

        issued.extend(await _ledger_ids(cluster, 5))
        # and back: the same agents, no restart
        started = await _cli("migrate", "start", "--source", back, "--target", there, "--clean-target", "--yes")
        assert started.returncode == 0, started.stderr
        assert "migration epoch 2 started" in started.stdout
        # an agent restarted meanwhile, configured with the store the cluster left: it follows the
        # COMPLETED flag kept there to where the cluster lives, and takes part from there
        victim = "bookie-1"
        writer = cluster.writers.pop(victim)
        await writer.stop_now()
        cluster.writers[f"{victim}-gone"] = writer
        await cluster.stop_agent(victim)
        again = await cluster.start_agent(victim, "bookie")
        assert str(again.home.store.url) == back and again.router.active is again.home.store
        await _wait(back, Phase.COMPLETED, Phase.FAILED, epoch=2)
        final = await _status(back)
        assert (final["phase"], final["lives_on"]) == ("COMPLETED", there), final
        assert final["copy"]["verified"] is True

        def all_back() -> bool:
            return all(str(a.home.store.url) == there and a.router.active is a.home.store and a.gate.is_open
                       for a in cluster.agents.values())

        await eventually(all_back, within=60, what="agents serve from where the cluster started")
        # each agent leaves the old home once it serves from the new one (its gate open there: a
        # record gone from here says its agent switched), so every record goes, shortly after
        left: dict[str, Any] = {}

        async def gone() -> bool:
            left.update(await _status(back))
            return left["participants"] == []

        await eventually(gone, within=60, what="every agent left the store the cluster left")
        del cluster.writers[f"{victim}-gone"]
        await cluster.writes_continue()
        await cluster.stop_writers()
        cluster.writers[f"{victim}-gone"] = writer
        home = await cluster.open(there)
        assert await cluster.missing_writes(home) == []
        for name, w in cluster.writers.items():
            assert w.failed == 0, (name, w.errors)
            if name != f"{victim}-gone":  # ephemerals carried both ways, still their clients'
                got = await home.get(w.ephemeral)
                assert got is not None and got[1].ephemeral and got[0] == w.node_id.encode()
        # the ledger-id generator's counter: every id handed out after a migration is above every id
        # handed out before it, whichever store handed it out
        issued.extend(await _ledger_ids(cluster, 5))
        assert issued == sorted(issued) and len(set(issued)) == len(issued), issued
        now = await _status(there)
        assert now["phase"] == "NOT_STARTED" and now["origin"] == {"epoch": 2, "source": back}, now
        assert {p["node_id"] for p in now["participants"]} == nodes
        kept = await read_flag(home)  # the first migration's flag, history now
        assert kept is not None and kept.epoch == 1 and kept.phase is Phase.COMPLETED
        assert json.loads((await home.get(paths.ORIGIN) or (b"{}", None))[0])["epoch"] == 2
        # a third start takes epoch 3
        flag = await control.start(home, back, clean_target=True)
        assert flag.epoch == 3
        await control.abort(home)
    finally:
        await cluster.close()
