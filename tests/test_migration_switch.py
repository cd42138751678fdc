"""The switch itself: the COMPLETED write is where the cluster moves, so a write that bypassed the
agents into the source after the coordinator's last check and before that write is carried into
the target while every agent still holds its writes (``released: false``), then the agents go; by
the next leader when the one that wrote COMPLETED is lost before it released."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from metashift.coordinator import control
from metashift.coordinator.driver import Coordinator
from metashift.coordinator.passes import Passes, PassResult
from metashift.migration.flag import MigrationFlag, read_flag
from metashift.migration.phase import Phase
from metashift_lab.sample_tree import generate
from tests.cluster import Cluster
from tests.harness import Gateways, eventually

pytestmark = pytest.mark.timeout(900)

LATE_PATH = "/admin/written-after-the-last-check"


@pytest.fixture
async def cluster(gateways: Gateways, zk_url: str, etcd_url: str) -> AsyncIterator[Cluster]:
    c = Cluster(gateways, zk_url, etcd_url, copy_engine="store")
    yield c
    await c.close()


async def test_a_write_bypassing_the_agents_between_the_last_check_and_completed_is_carried(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = await cluster.source()
    await generate(source, 2, seed=1, ephemerals=False)
    await cluster.start(brokers=2, bookies=1)
    bypass = await cluster.open(cluster.source_url)  # a ZooKeeper client of its own, not an agent's
    original = Passes.final
    late: list[MigrationFlag] = []

    async def final_then_a_write_behind_the_agents_back(self: Passes, flag: MigrationFlag) -> PassResult:
        result = await original(self, flag)
        if result.failure is None and not late:
            # the last delta is carried and checked: the coordinator writes COMPLETED next
            await bypass.put(LATE_PATH, b"in the last instant")
            late.append(flag)
        return result

    monkeypatch.setattr(Passes, "final", final_then_a_write_behind_the_agents_back)
    await control.start(source, cluster.target_url)
    status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
    assert status["phase"] == "COMPLETED", status
    assert late, "the last delta never passed"
    await eventually(cluster.all_on_target, within=60, what="agents serve from the target")
    flag = await read_flag(source)
    assert flag is not None and flag.released and flag.reason is None, flag
    target = await cluster.open(cluster.target_url)
    got = await target.get(LATE_PATH)
    assert got is not None and got[0] == b"in the last instant"
    # and the agents' clients see it: the write is the cluster's
    client_view = await cluster.agents["broker-1"].router.active.get(LATE_PATH)
    assert client_view is not None and client_view[0] == b"in the last instant"


async def test_a_coordinator_lost_between_completed_and_the_release_is_replaced_and_the_next_one_carries(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = await cluster.source()
    await generate(source, 2, seed=2, ephemerals=False)
    await cluster.start(brokers=2, bookies=1)
    bypass = await cluster.open(cluster.source_url)
    original_final, original_release = Passes.final, Coordinator._release
    late: list[MigrationFlag] = []
    stuck: list[str] = []
    never = asyncio.Event()

    async def final_then_a_write_behind_the_agents_back(self: Passes, flag: MigrationFlag) -> PassResult:
        result = await original_final(self, flag)
        if result.failure is None and not late:
            await bypass.put(LATE_PATH, b"before COMPLETED")
            late.append(flag)
        return result

    async def the_first_leader_never_releases(self: Coordinator, flag: MigrationFlag) -> None:
        if not stuck:
            stuck.append(self.node_id)
            await never.wait()  # until its agent stops
        await original_release(self, flag)

    monkeypatch.setattr(Passes, "final", final_then_a_write_behind_the_agents_back)
    monkeypatch.setattr(Coordinator, "_release", the_first_leader_never_releases)
    await control.start(source, cluster.target_url)
    await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
    await eventually(lambda: bool(stuck), within=60, what="the leader reached the release")
    flag = await read_flag(source)
    assert flag is not None and flag.phase is Phase.COMPLETED and not flag.released, flag
    # the agents hold their writes meanwhile: none serves from the target yet
    assert not any(agent.gate.is_open for agent in cluster.agents.values())
    await cluster.stop_agent(stuck[0])
    await eventually(cluster.all_on_target, within=120, what="the agents left serve from the target")
    flag = await read_flag(source)
    assert flag is not None and flag.released and flag.reason is None and flag.coordinator != stuck[0], flag
    target = await cluster.open(cluster.target_url)
    got = await target.get(LATE_PATH)
    assert got is not None and got[0] == b"before COMPLETED"
