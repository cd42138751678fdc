"""The migration end to end: agents of 3 brokers and 2 bookies with clients writing all the time,
one elected coordinator, real ZooKeeper and etcd, the copy on real Spark."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from metashift.coordinator import control
from metashift.migration.phase import Phase
from metashift.sample_tree import generate
from tests.cluster import Cluster
from tests.harness import Gateways, eventually

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
async def cluster(gateways: Gateways, zk_url: str, etcd_url: str) -> AsyncIterator[Cluster]:
    c = Cluster(gateways, zk_url, etcd_url)
    yield c
    await c.close()


async def _seed(cluster: Cluster, topics: int = 10) -> None:
    source = await cluster.source()
    await generate(source, topics, seed=1, ephemerals=False)


async def test_full_migration_zk_to_etcd_loses_no_acknowledged_write(cluster: Cluster) -> None:
    await _seed(cluster)
    await cluster.start()
    await cluster.start_writers()
    source = await cluster.source()
    flag = await control.start(source, cluster.target_url)
    assert flag.phase is Phase.PREPARATION and flag.epoch == 1
    await cluster.wait_phase(Phase.COPYING)
    # every agent holds its writes and has acknowledged; the freeze carried the ephemerals
    for agent in cluster.agents.values():
        assert not agent.gate.is_open
    status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
    assert status["phase"] == "COMPLETED", status
    assert status["copy"]["verified"] is True
    assert all(p["acknowledged"] for p in status["participants"]) and len(status["participants"]) == 5
    await eventually(cluster.all_on_target, what="agents serve from the target")
    # keep writing through the switch, then look in the target
    await cluster.writes_continue()
    await cluster.stop_writers()
    target = await cluster.open(cluster.target_url)
    assert await cluster.missing_writes(target) == []
    for writer in cluster.writers.values():
        assert writer.failed == 0, writer.errors
        got = await target.get(writer.ephemeral)  # carried into the target, still the client's
        assert got is not None and got[0] == writer.node_id.encode() and got[1].ephemeral
        through_agent = await writer.client.get(writer.ephemeral)
        assert through_agent is not None and through_agent[1].created_by_self
    # nothing reaches the source after the freeze: the writers' last values are only in the target
    assert await cluster.missing_writes(source) != []
