"""The whole migration between every pair of stores besides zk -> etcd (``test_migration.py``):
zk -> zk, etcd -> zk, and into and out of Oxia (zk -> oxia, etcd -> oxia, oxia -> zk,
oxia -> etcd), the same cluster each time: agents of 3 brokers and 2 bookies, clients writing all
along, ephemerals carried, pre-copy and freeze, every acknowledged write in the target, and a lock
queue's holder still first in line after the switch."""

from __future__ import annotations

import pytest

from metashift.coordinator import control
from metashift.migration.phase import Phase
from tests.cluster import Cluster
from tests.harness import Gateways
from tests.migration_support import finish_and_check, seed

pytestmark = pytest.mark.timeout(900)

#: A ZooKeeper lock recipe's queue (kazoo's, Curator's): nodes named ``%010d``, the lowest holds the lock.
LOCK_QUEUE = "/locks/queue/"
#: Every pair besides zk -> etcd (test_migration.py): the same cluster, clients writing all along,
#: ephemerals carried, pre-copy and freeze.
OTHER_PAIRS = ["zk-to-zk", "etcd-to-zk", "zk-to-oxia", "etcd-to-oxia", "oxia-to-zk", "oxia-to-etcd"]


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
        lives = await cluster.open(target)
        # a newcomer's sequential node under it sorts after the holder's, as on the source
        later = await cluster.writers["broker-2"].client.put(LOCK_QUEUE + "lock-", b"newcomer", ephemeral=True,
                                                             sequential=True)
        assert int(later.path.rsplit("-", 1)[1]) > 57 and await lives.exists(held.path), later.path
        for writer in cluster.writers.values():
            assert writer.failed == 0, writer.errors
            got = await lives.get(writer.ephemeral)  # carried into the target, still the client's
            assert got is not None and got[0] == writer.node_id.encode() and got[1].ephemeral
            through_agent = await writer.client.get(writer.ephemeral)
            assert through_agent is not None and through_agent[1].created_by_self
    finally:
        await cluster.close()
