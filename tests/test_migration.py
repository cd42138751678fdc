"""The migration end to end: agents of 3 brokers and 2 bookies with clients writing all the time,
one elected coordinator, real ZooKeeper and etcd, the copy on real Spark."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.flag import read_flag
from metashift.migration.phase import Phase
from tests.cluster import Cluster
from tests.harness import Gateways, eventually, retry_while_unavailable
from tests.migration_support import (
    check_writers_carried,
    copy_job_paused,
    copy_job_pid,
    eventually_status,
    finish_and_check,
    hold_preparation,
    leader_of,
    seed,
)

pytestmark = pytest.mark.timeout(900)

#: The freeze's last delta carried by a Spark pass whatever its size: COPYING lasts long enough
#: for a test to act inside it.
SPARK_IN_THE_FREEZE = {"coordinator.spark_delta_threshold": 0}


@pytest.fixture
async def cluster(gateways: Gateways, zk_url: str, etcd_url: str) -> AsyncIterator[Cluster]:
    """Agents in front of this test's ZooKeeper, migrating into its etcd, their full passes on the
    store layer: the protocol is what these tests try (Spark's copy is tried by
    ``test_migration_pairs``, ``test_copy`` and the sandboxes), and a Spark job's start would cost
    more than the copy of their tree."""
    c = Cluster(gateways, zk_url, etcd_url, copy_engine="store")
    yield c
    await c.close()


@pytest.fixture
async def spark_cluster(gateways: Gateways, zk_url: str, etcd_url: str) -> AsyncIterator[Cluster]:
    """The same on Spark, for the tests that hold the copy job (``copy_job_paused``)."""
    c = Cluster(gateways, zk_url, etcd_url)
    yield c
    await c.close()


async def test_full_migration_zk_to_etcd_loses_no_acknowledged_write(cluster: Cluster) -> None:
    await seed(cluster)
    await cluster.start()
    await cluster.start_writers()
    source = await cluster.source()
    flag = await control.start(source, cluster.target_url)
    assert flag.phase is Phase.SYNCING and flag.epoch == 1
    # the pre-copy runs while writes flow: writers keep being acknowledged on the source
    await cluster.wait_phase(Phase.SYNCING)
    assert all(agent.gate.is_open for agent in cluster.agents.values())
    status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
    assert status["phase"] == "COMPLETED", status
    assert status["copy"]["verified"] is True and status["copy"]["passes"] >= 1
    # the time of each pass, and of each stage of the Spark pass: a full pass, then the freeze's last delta
    timings = status["copy"]["timings"]
    full = [t for t in timings if t["kind"] == "full"]
    assert full and full[0]["pass"] == 1 and full[0]["seconds"] > 0, timings
    assert set(full[0]["stages"]) == {"process", "spark_ready", "listing", "copy", "compaction", "verify"}
    assert full[0]["stages"]["copy"] > 0 and full[0]["stages"]["verify"] > 0, timings
    assert timings[-1]["kind"] == "final" and timings[-1]["paths"] >= 0, timings
    # every agent acknowledged; after COMPLETED they leave the source one by one and register where
    # they now serve (the way back starts there), so the source may list any number of them
    assert all(p["acknowledged"] for p in status["participants"]) and len(status["participants"]) <= 5
    await eventually(cluster.all_on_target, what="agents serve from the target")
    for agent in cluster.agents.values():  # the agent's own view, in its metrics
        registry = agent.metrics.registry
        # COMPLETED, or NOT_STARTED once the agent's home moved to the target (no migration there yet)
        assert 1.0 in (registry.get_sample_value("metashift_agent_migration_phase",
                                                 {"metashift_agent_migration_phase": phase})
                       for phase in ("COMPLETED", "NOT_STARTED"))  # fmt: skip
        assert registry.get_sample_value("metashift_agent_active_store",
                                         {"metashift_agent_active_store": "target"}) == 1.0
        assert (registry.get_sample_value("metashift_agent_write_hold_seconds_count") or 0) >= 1
    target_store = await cluster.open(cluster.target_url)

    async def registered_in_the_target() -> bool:
        return len((await control.status(target_store)).to_dict()["participants"]) == 5

    await eventually(registered_in_the_target, within=60, what="every agent registered in the target")
    # keep writing through the switch, then look in the target
    await cluster.writes_continue()
    await cluster.stop_writers()
    target = await cluster.open(cluster.target_url)
    assert await cluster.missing_writes(target) == []
    await check_writers_carried(cluster, target)
    # nothing reaches the source after the freeze: the writers' last values are only in the target
    assert await cluster.missing_writes(source) != []


async def test_a_participant_that_never_acknowledges_fails_the_migration(cluster: Cluster) -> None:
    await cluster.start(settings={"coordinator.prepare_timeout": 3.0})
    await cluster.start_writers()
    holder = await hold_preparation(cluster)
    try:
        await control.start(await cluster.source(), cluster.target_url)
        status = await finish_and_check(cluster, Phase.FAILED)
        assert "silent-node" in status["reason"] and "not acknowledged within 3s" in status["reason"]
        # the agents dropped the target and the coordinator emptied it: a new start may follow
        status = await eventually_status(cluster, lambda s: s["target_cleaned"])
        target = await cluster.open(cluster.target_url)
        assert await target.get_children("/") == []
    finally:
        await holder.close()


async def test_a_participant_that_dies_in_preparation_is_not_waited_for(cluster: Cluster) -> None:
    await cluster.start()
    await cluster.start_writers()
    holder = await hold_preparation(cluster)
    await control.start(await cluster.source(), cluster.target_url)
    await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 5)
    await holder.close()  # the silent participant's session ends: it is no longer waited for
    await finish_and_check(cluster, Phase.COMPLETED)


async def test_a_participant_that_joins_in_preparation_must_acknowledge_too(cluster: Cluster) -> None:
    await cluster.start(brokers=2, bookies=1)
    await cluster.start_writers()
    holder = await hold_preparation(cluster)
    await control.start(await cluster.source(), cluster.target_url)
    await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 3)
    late = await cluster.start_agent("broker-late", "broker")
    await eventually(lambda: not late.gate.is_open, what="the late agent freezes")
    status = await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 4)
    assert status["phase"] == "PREPARATION"
    assert {p["node_id"] for p in status["participants"] if p["acknowledged"]} >= {"broker-late"}
    await holder.close()
    await finish_and_check(cluster, Phase.COMPLETED)
    assert late.router.active is late.participant.target


@pytest.mark.parametrize("phase", [Phase.SYNCING, Phase.PREPARATION])
async def test_the_coordinator_killed_mid_migration_a_new_leader_finishes_or_fails_it(
    spark_cluster: Cluster, phase: Phase
) -> None:
    """Killed in SYNCING: the new leader runs a full pass of its own and completes. Killed inside
    the freeze: the new leader followed the source's changes as a standby since the last full
    pass began, so it carries and checks them and completes too (issue 17)."""
    cluster = spark_cluster
    await seed(cluster)
    await cluster.start()
    await cluster.start_writers()
    holder = await hold_preparation(cluster) if phase is Phase.PREPARATION else None
    await control.start(await cluster.source(), cluster.target_url)
    if holder is not None:
        await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 5)
    else:
        await eventually_status(cluster, lambda s: (s["copy"] or {}).get("stage", "").startswith("pass 1"))
    old = await leader_of(cluster)
    writer = cluster.writers.pop(old)
    await writer.stop_now()
    cluster.writers[f"{old}-done"] = writer  # its acknowledged writes must survive all the same
    # in SYNCING, pass 1 held until its coordinator is gone: it cannot reach PREPARATION first
    with copy_job_paused() if holder is None else contextlib.nullcontext():
        await cluster.stop_agent(old)
    await eventually(lambda: _leader_is_not(cluster, old), what="a new leader")
    if holder is not None:
        await holder.close()
    expect = Phase.COMPLETED
    status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
    assert status["phase"] == expect.value, status
    assert status["coordinator"] != old
    await eventually(cluster.all_on_target if expect is Phase.COMPLETED else cluster.all_on_source,
                     within=60, what="agents settle")
    del cluster.writers[f"{old}-done"]
    await cluster.writes_continue()
    await cluster.stop_writers()
    lives = await cluster.open(cluster.target_url if expect is Phase.COMPLETED else cluster.source_url)
    cluster.writers[f"{old}-done"] = writer
    assert await cluster.missing_writes(lives) == []


async def test_a_coordinator_that_took_over_the_freeze_without_following_makes_a_full_last_pass(
    cluster: Cluster,
) -> None:
    """The only other candidate joined inside the freeze, so it never saw a round of changes
    begin and does not know what changed: when the leader dies it takes over, makes the freeze's
    last pass a full pass (copy and verification) and completes with nothing lost."""
    await seed(cluster)
    await cluster.start_agent("broker-1", "broker")
    await cluster.start_agent("broker-2", "broker", coordinator=False)
    await cluster.start_agent("bookie-1", "bookie", coordinator=False)
    await cluster.start_writers()
    holder = await hold_preparation(cluster)
    await control.start(await cluster.source(), cluster.target_url)
    await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 3)
    await cluster.start_agent("broker-3", "broker")  # a candidate, from inside the freeze
    await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 4)
    assert await leader_of(cluster) == "broker-1"
    writer = cluster.writers.pop("broker-1")
    await writer.stop_now()
    cluster.writers["broker-1-done"] = writer  # its acknowledged writes must survive all the same
    await cluster.stop_agent("broker-1")
    await eventually(lambda: _leader_is_not(cluster, "broker-1"), what="a new leader")
    await holder.close()
    status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
    assert status["phase"] == Phase.COMPLETED.value and status["coordinator"] == "broker-3", status
    finals = [t for t in status["copy"]["timings"] if t["kind"] == "final"]
    assert finals and "copy" in finals[-1].get("stages", {}), status["copy"]["timings"]
    assert status["copy"]["verified"] is True
    await eventually(cluster.all_on_target, within=60, what="agents settle")
    del cluster.writers["broker-1-done"]
    await cluster.writes_continue()
    await cluster.stop_writers()
    cluster.writers["broker-1-done"] = writer
    assert await cluster.missing_writes(await cluster.open(cluster.target_url)) == []


async def _leader_is_not(cluster: Cluster, old: str) -> bool:
    source = await cluster.source()
    got = await source.get(paths.LEADER)
    return got is not None and json.loads(got[0])["nodeId"] != old


async def test_abort_then_a_new_start_completes(cluster: Cluster) -> None:
    await cluster.start()
    await cluster.start_writers()
    holder = await hold_preparation(cluster)
    source = await cluster.source()
    await control.start(source, cluster.target_url)
    await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 5)
    with pytest.raises(control.MigrationRefused, match=r"already in progress \(phase PREPARATION\)"):
        await control.start(source, cluster.target_url)
    await control.abort(source)
    await holder.close()
    status = await cluster.wait_phase(Phase.FAILED)
    assert status["reason"] == "aborted"
    await eventually(cluster.all_on_source, within=60, what="agents back on the source")
    await cluster.writes_continue()
    flag = await control.start(source, cluster.target_url)  # waits for the target to be clean
    assert flag.epoch == 2
    await finish_and_check(cluster, Phase.COMPLETED)


async def test_agents_restarted_mid_migration_and_after_completion(cluster: Cluster) -> None:
    await cluster.start()
    await cluster.start_writers()
    holder = await hold_preparation(cluster)
    await control.start(await cluster.source(), cluster.target_url)
    await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 5)
    leader = await leader_of(cluster)
    victim = next(n for n in cluster.agents if n.startswith("bookie") and n != leader)
    writer = cluster.writers.pop(victim)
    await writer.stop_now()
    await cluster.stop_agent(victim)
    again = await cluster.start_agent(victim, "bookie")
    assert not again.gate.is_open  # it read the flag first: frozen before serving anyone
    await eventually_status(cluster, lambda s: [p["acknowledged"] for p in s["participants"]
                                                if p["node_id"] == victim] == [True])
    await holder.close()
    await finish_and_check(cluster, Phase.COMPLETED)
    # restarted after COMPLETED: straight to the target
    await cluster.stop_agent(victim)
    after = await cluster.start_agent(victim, "bookie")
    assert after.router.active is after.participant.target and after.gate.is_open
    from metashift.client import connect

    async with await connect(after.address) as client:
        await client.put("/after/restart", b"x")
    target = await cluster.open(cluster.target_url)
    source = await cluster.source()
    assert await target.get("/after/restart") is not None and await source.get("/after/restart") is None
    cluster.writers[victim] = writer
    assert await cluster.missing_writes(target) == []


async def test_a_write_that_bypasses_the_agents_during_copying_fails_the_migration(cluster: Cluster) -> None:
    await seed(cluster)
    await cluster.start(settings=SPARK_IN_THE_FREEZE)
    await cluster.start_writers()
    source = await cluster.source()
    await control.start(source, cluster.target_url)
    await cluster.wait_phase(Phase.COPYING)
    await source.put("/admin/bypass", b"written behind the agents' back")
    status = await finish_and_check(cluster, Phase.FAILED)
    assert "/admin/bypass" in status["reason"] and "bypassing the agents" in status["reason"], status["reason"]


async def test_the_target_down_during_copying_fails_cleanly(gateways: Gateways, zk_url: str,
                                                            fresh_servers: Any) -> None:
    etcd = fresh_servers.etcd()
    cluster = Cluster(gateways, zk_url, f"etcd://127.0.0.1:{etcd.port}/target", copy_engine="store")
    try:
        await seed(cluster)
        await cluster.start(settings=SPARK_IN_THE_FREEZE)
        await cluster.start_writers()
        await control.start(await cluster.source(), cluster.target_url)
        await cluster.wait_phase(Phase.COPYING)
        etcd.stop()
        status = await finish_and_check(cluster, Phase.FAILED)
        assert status["reason"]
    finally:
        await cluster.close()


async def test_a_change_stream_broken_in_syncing_leads_to_another_full_pass(gateways: Gateways, etcd_url: str,
                                                                           fresh_servers: Any) -> None:
    """Nodes that pass 1 copied change in the source while the coordinator's change stream is
    broken (a ZooKeeper restart): one is deleted, one deleted and created again (younger than its
    copy). The next full pass must leave the target equal to the source: the first removed, not
    failed on as "only in the target"; the second carried, not failed on as a conflict."""
    zk = fresh_servers.zk()
    cluster = Cluster(gateways, f"{zk.url}/cluster", etcd_url)
    try:
        await seed(cluster, topics=40)
        source = await cluster.source()
        # top level: the copy's driver writes it before Spark's job has even started
        await source.put("/doomed", b"copied by pass 1, deleted unseen", expected_version=-1)
        await source.put("/reborn", b"first", expected_version=-1)
        await source.put("/reborn", b"first, again", expected_version=0)
        await cluster.start()
        await cluster.start_writers()
        await control.start(source, cluster.target_url)
        target = await cluster.open(cluster.target_url)
        await eventually(lambda: target.exists("/doomed"), within=120, what="pass 1 copies /doomed")
        await eventually(lambda: target.exists("/reborn"), within=120, what="pass 1 copies /reborn")
        with copy_job_paused():  # pass 1 cannot end before the break and the deletion
            # every connection to ZooKeeper drops; it is back on the same data before sessions expire
            await asyncio.to_thread(zk.restart)
            await retry_while_unavailable(lambda: source.delete("/doomed"), attempts=100, delay=0.2)
            await source.delete("/reborn")
            await source.put("/reborn", b"second life", expected_version=-1)
        status = await finish_and_check(cluster, Phase.COMPLETED)
        assert status["copy"]["passes"] >= 2, status
        assert status["copy"]["verified"] is True
        assert await target.get("/doomed") is None
        reborn = await target.get("/reborn")
        assert reborn is not None and reborn[0] == b"second life" and reborn[1].version == 0
    finally:
        await cluster.close()


async def test_a_node_deleted_and_created_again_during_every_full_pass_costs_no_more_passes(
        gateways: Gateways, etcd_url: str, fresh_servers: Any) -> None:  # fmt: skip
    """Clients that delete and create nodes all the time: every full pass after the first finds
    such a node ahead in the target (copied by the pass before, deleted and created again since).
    The pass carries it and goes on; it must not run yet another full pass for it (each would
    meet another, and the migration failed with "no full pass came through clean")."""
    zk = fresh_servers.zk()
    cluster = Cluster(gateways, f"{zk.url}/cluster", etcd_url)
    try:
        await seed(cluster, topics=40)
        source = await cluster.source()
        await source.put("/reborn", b"life 0", expected_version=-1)
        await cluster.start()
        await cluster.start_writers()
        await control.start(source, cluster.target_url)
        target = await cluster.open(cluster.target_url)
        await eventually(lambda: target.exists("/reborn"), within=120, what="pass 1 copies /reborn")
        first = copy_job_pid()
        with copy_job_paused():  # a ZooKeeper restart breaks the change stream: another full pass
            await asyncio.to_thread(zk.restart)
            await retry_while_unavailable(lambda: source.get("/"), attempts=100, delay=0.2)
        lives = 0

        async def every_pass_meets_one() -> bool:
            # each new copy job is held before it reads anything (its interpreter is still
            # starting) while /reborn is deleted and created again: the pass sees a conflict
            nonlocal first, lives
            pid = copy_job_pid()
            if pid is not None and pid != first:
                first = pid
                os.killpg(pid, signal.SIGSTOP)
                try:
                    lives += 1
                    await source.delete("/reborn")
                    await source.put("/reborn", f"life {lives}".encode(), expected_version=-1)
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGCONT)
            flag = await read_flag(source)
            return flag is not None and flag.phase is not Phase.SYNCING

        await eventually(every_pass_meets_one, within=600, what="SYNCING ends")
        status = await finish_and_check(cluster, Phase.COMPLETED)
        assert lives >= 1, "no full pass after the first"
        assert status["copy"]["verified"] is True
        reborn = await target.get("/reborn")
        assert reborn is not None and reborn[0] == f"life {lives}".encode(), (reborn, lives)
    finally:
        await cluster.close()


async def test_a_change_stream_broken_in_the_freeze_fails_with_nothing_lost(gateways: Gateways, etcd_url: str,
                                                                           fresh_servers: Any) -> None:
    zk = fresh_servers.zk()
    cluster = Cluster(gateways, f"{zk.url}/cluster", etcd_url)
    try:
        await cluster.start()
        await cluster.start_writers()
        holder = await hold_preparation(cluster)
        await control.start(await cluster.source(), cluster.target_url)
        await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 5)
        await asyncio.to_thread(zk.restart)  # every connection to ZooKeeper drops, the coordinator's too
        await retry_while_unavailable(lambda: holder.get("/"), attempts=50, delay=0.2)
        await holder.close()  # the last acknowledgement is in: the freeze's delta is not trusted
        status = await finish_and_check(cluster, Phase.FAILED)
        # the coordinator's watch broke ("...broke..."), or, on a machine so loaded that its session
        # expired meanwhile, another agent took over the freeze ("...did not follow the source...")
        assert "cannot be trusted inside the freeze" in status["reason"], status
    finally:
        await cluster.close()
