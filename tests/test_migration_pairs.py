"""The whole migration between every pair of stores besides zk -> etcd (``test_migration.py``):
zk -> zk, etcd -> zk, and into and out of Oxia (zk -> oxia, etcd -> oxia, oxia -> zk,
oxia -> etcd), the same cluster each time: agents of 3 brokers and 2 bookies, clients writing all
along, ephemerals carried, pre-copy and freeze, every acknowledged write in the target, and a lock
queue's holder still first in line after the switch."""

from __future__ import annotations

from typing import Any

import pytest

from metashift.coordinator import control
from metashift.migration.phase import Phase
from metashift.stores.sequence_floors import read_floor
from tests.cluster import Cluster
from tests.harness import Gateways, eventually
from tests.migration_support import check_writers_carried, finish_and_check, hold_preparation, seed

pytestmark = pytest.mark.timeout(900)

#: A ZooKeeper lock recipe's queue (kazoo's, Curator's): nodes named ``%010d``, the lowest holds the lock.
LOCK_QUEUE = "/locks/queue/"
#: Every pair besides zk -> etcd (test_migration.py) and etcd -> zk (the floors' test below, the
#: same cluster and checks with PREPARATION held): clients writing all along, ephemerals carried,
#: pre-copy and freeze.
OTHER_PAIRS = ["zk-to-zk", "zk-to-oxia", "etcd-to-oxia", "oxia-to-zk", "oxia-to-etcd"]


@pytest.mark.parametrize("direction", OTHER_PAIRS)
async def test_the_same_migration_between_other_stores(gateways: Gateways, request: pytest.FixtureRequest,
                                                       namespace: str, direction: str) -> None:
    src, dst = direction.split("-to-")
    source = request.getfixturevalue(f"{src}_server").url + namespace + "-src"
    target = request.getfixturevalue(f"{dst}_server").url + namespace + "-dst"
    cluster = Cluster(gateways, source, target)
    try:
        await seed(cluster)
        await cluster.start()
        await cluster.start_writers()
        # a lock queue's node held through the migration, its number far above the count of
        # children the target sees created (a lock taken many times before)
        held = await cluster.writers["broker-1"].client.put(LOCK_QUEUE + "lock-0000000057", b"holder", ephemeral=True)
        await control.start(await cluster.source(), target)
        status = await finish_and_check(cluster, Phase.COMPLETED)
        assert status["copy"]["verified"] is True
        await _check_after_switch(cluster, held.path)
    finally:
        await cluster.close()


async def _check_after_switch(cluster: Cluster, held: str) -> None:
    """After COMPLETED: a newcomer in the lock queue sorts after its holder as on the source, no
    client's write failed, every client's ephemeral was carried into the target and is still its own."""
    lives = await cluster.open(cluster.target_url)
    later = await cluster.writers["broker-2"].client.put(LOCK_QUEUE + "lock-", b"newcomer", ephemeral=True,
                                                         sequential=True)
    assert int(later.path.rsplit("-", 1)[1]) > 57 and await lives.exists(held), later.path
    await check_writers_carried(cluster, lives)


async def test_every_floor_is_in_the_target_before_any_agent_switches(
    gateways: Gateways, zk_server: Any, etcd_server: Any, namespace: str
) -> None:
    """Each agent raises the floors above the lock-queue names it carried in its freeze, before it
    acknowledges PREPARATION. Raised at its own switch instead, an agent that switched first could
    read the target's floors before another agent raised its own, and let its client's newcomer be
    named below the holder by the target's own counter (seen: oxia -> zk, a newcomer named 1 under
    a holder's 57). Also the etcd -> zk case of the pairs above: the same checks after the switch."""
    cluster = Cluster(gateways, etcd_server.url + namespace + "-src", zk_server.url + namespace + "-dst")
    try:
        await seed(cluster)
        await cluster.start()
        await cluster.start_writers()
        held = await cluster.writers["broker-1"].client.put(LOCK_QUEUE + "lock-0000000057", b"holder", ephemeral=True)
        holder = await hold_preparation(cluster)  # PREPARATION lasts until it goes: nobody switches
        try:
            await control.start(await cluster.source(), cluster.target_url)
            target = await cluster.open(cluster.target_url)

            async def floored() -> bool:
                return (await read_floor(target, LOCK_QUEUE.rstrip("/")) or 0) >= 58

            # the bound takes in the SYNCING copy on Spark before it (minutes under load)
            await eventually(floored, within=600, what="the lock queue's floor in the target, in PREPARATION")
            assert (await cluster.status())["phase"] == Phase.PREPARATION.value
        finally:
            await holder.close()
        status = await finish_and_check(cluster, Phase.COMPLETED)
        assert status["copy"]["verified"] is True
        await _check_after_switch(cluster, held.path)
    finally:
        await cluster.close()
