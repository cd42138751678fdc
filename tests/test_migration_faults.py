"""Agents that die mid-migration (issue 17): real ``metashift agent`` processes (SIGKILL, like a
crashed node) in front of real ZooKeeper, etcd and Oxia, clients writing through them all along.

A dead participant is dropped from the wait by its heartbeat (``coordinator.participant_timeout``),
not after its store session times out, and is named in the status; a dead coordinator is replaced
by a standby that followed the changes since the last full pass, which completes the freeze. In
every case no acknowledged write is lost. (How long the freeze lasts is measured by the sandbox,
``metashift sandbox --kill-agent-at PHASE --kill-agent participant|coordinator``, not here.)
"""

from __future__ import annotations

import json
import signal
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from metashift.client import connect
from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.participants import ParticipantRecord
from metashift.migration.phase import Phase
from metashift.stores import Store, open_store
from metashift_lab.agents import AgentProcess, start_agents, stop_agents
from metashift_lab.sample_tree import generate
from tests.cluster import Cluster, Writer
from tests.harness import eventually

pytestmark = pytest.mark.timeout(900)

#: Held writes must outlast the wait for a dead participant's store session (30 s) that the
#: migration must no longer wait for; the acknowledgements may take their time on a loaded machine.
#: An agent whose heartbeats stall for most of participant_timeout holds its writes and answers
#: those in flight WriteOutcomeUnknown (its lease): 8 s rides out a machine loaded by a second
#: process beside these agent processes and their Spark jobs (5 s did not, once).
SETTINGS = {"prepare_timeout": 120.0, "participant_timeout": 8.0}
#: The freeze's last delta carried by a Spark pass: COPYING lasts long enough to act inside it.
SPARK_IN_THE_FREEZE = {**SETTINGS, "spark_delta_threshold": 0}


class Processes:
    """Agent processes of one test in front of ``source_url``, with their writers."""

    def __init__(self, source_url: str, target_url: str) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="ms-faults-"))
        self.cluster = Cluster(None, source_url, target_url)  # type: ignore[arg-type]  # no in-process agents
        self.agents: dict[str, AgentProcess] = {}

    async def start(self, settings: dict[str, Any]) -> None:
        for node_id, role in (("broker-1", "broker"), ("broker-2", "broker"), ("bookie-1", "bookie")):
            self.agents[node_id] = AgentProcess(
                node_id, role, self.work_dir, self.cluster.source_url, hold_timeout=300.0,
                prepare_timeout=float(settings["prepare_timeout"]),
                coordinator_settings={k: v for k, v in settings.items() if k != "prepare_timeout"},
            )
        await start_agents(list(self.agents.values()))
        for node_id, agent in self.agents.items():
            # a Spark pass in the freeze takes minutes on a loaded machine: writes may wait that long
            writer = Writer(node_id, await connect(agent.address), timeout=290.0)
            await writer.start()
            self.cluster.writers[node_id] = writer

    async def leader(self) -> str:
        source = await self.cluster.source()
        got = await source.get(paths.LEADER)
        assert got is not None
        return str(json.loads(got[0])["nodeId"])

    async def kill(self, node_id: str) -> None:
        """Its writer stops first (its acknowledged writes must survive all the same), then SIGKILL."""
        await self.cluster.writers[node_id].stop_now()
        await self.agents[node_id].kill()

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{a.log_tail(4000)}" for n, a in self.agents.items())

    async def finish(self, killed: str) -> tuple[dict[str, Any], Store]:
        """Wait for the end; check the writes where the cluster lives; return the source's status
        and the target store."""
        status = await self.cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
        assert status["phase"] == "COMPLETED", (status, self.logs())
        live = {n: w for n, w in self.cluster.writers.items() if n != killed}
        dead = self.cluster.writers[killed]
        self.cluster.writers = live
        await self.cluster.writes_continue()
        await self.cluster.stop_writers()
        self.cluster.writers = {**live, killed: dead}
        target = await self.cluster.open(self.cluster.target_url)
        assert await self.cluster.missing_writes(target) == []
        for writer in live.values():
            assert writer.failed == 0, writer.errors
        return status, target

    async def close(self) -> None:
        await self.cluster.close()
        await stop_agents(list(self.agents.values()))


#: The agents' store sessions outlive every test here: only heartbeats can tell that one died
#: (ZooKeeper's local servers allow 120 s at most; an etcd lease may be as long as one likes).
#: (Oxia keeps a session's timeout within 5 minutes.)
LONG_SESSIONS = {"zk": "?session_timeout=120", "etcd": "?session_timeout=900", "oxia": "?session_timeout=300"}


@pytest.fixture
async def processes(request: pytest.FixtureRequest, zk_url: str, etcd_url: str) -> AsyncIterator[Processes]:
    """zk -> etcd; with ``@pytest.mark.from_etcd``, etcd -> zk; with ``@pytest.mark.from_oxia``,
    oxia -> zk."""
    source_url, target_url = (etcd_url, zk_url) if request.node.get_closest_marker("from_etcd") else (zk_url, etcd_url)
    if request.node.get_closest_marker("from_oxia"):
        source_url, target_url = str(request.getfixturevalue("oxia_url")), zk_url
    p = Processes(source_url + LONG_SESSIONS[source_url.split(":")[0]], target_url)
    source = await open_store(source_url)
    await generate(source, 5, seed=2, ephemerals=False)
    await source.close()
    yield p
    await p.close()


async def _hold_preparation(url: str) -> Store:
    """A participant without a heartbeat (a record by hand): PREPARATION lasts until it goes."""
    holder = await open_store(url)
    await holder.put(paths.PARTICIPANT_PREFIX, ParticipantRecord("silent-node", "broker", "nowhere").to_json(),
                     ephemeral=True, sequential=True)
    return holder


async def _acknowledged(cluster: Cluster, count: int) -> None:
    async def enough() -> bool:
        return sum(p["acknowledged"] for p in (await cluster.status())["participants"]) >= count

    await eventually(enough, within=240, what=f"{count} acknowledgements")


async def _registered_in(url: str) -> set[str]:
    async with await open_store(url, watch=False) as store:
        return {p["node_id"] for p in (await control.status(store)).to_dict()["participants"]}


@pytest.mark.from_etcd  # stopped through SYNCING: its lease must outlive the copy, however slow
async def test_a_participant_killed_in_preparation_is_dropped_and_named(processes: Processes) -> None:
    await processes.start(SETTINGS)
    cluster = processes.cluster
    leader = await processes.leader()
    victim = next(n for n in processes.agents if n != leader)
    # stopped first, so that it cannot acknowledge; killed once the others have
    await cluster.writers[victim].stop_now()
    processes.agents[victim].signal(signal.SIGSTOP)
    holder = await _hold_preparation(cluster.source_url)
    # the stopped agent cannot answer the pre-flight check's dry open: named, and forced past
    await control.start(await cluster.source(), cluster.target_url, force_reason="a participant stopped on purpose",
                        wait=2.0)
    await cluster.wait_phase(Phase.PREPARATION)
    await _acknowledged(cluster, 2)
    await processes.kill(victim)
    await holder.close()
    status, _ = await processes.finish(victim)
    assert status["dropped"] == [victim], status
    assert [p["alive"] for p in status["participants"] if p["node_id"] == victim] == [False], status
    assert await _registered_in(cluster.target_url) == set(processes.agents) - {victim}


async def test_the_coordinator_killed_in_preparation_is_replaced_and_the_migration_completes(
    processes: Processes,
) -> None:
    await _coordinator_killed_in_preparation(processes)


@pytest.mark.from_oxia
async def test_the_coordinator_killed_in_preparation_on_an_oxia_home_is_replaced(processes: Processes) -> None:
    """The same from Oxia: the dead leader's node lives on its Oxia session (five minutes); its
    heartbeat is what tells the candidates, which take the leadership on Oxia and complete."""
    await _coordinator_killed_in_preparation(processes)


async def _coordinator_killed_in_preparation(processes: Processes) -> None:
    await processes.start(SETTINGS)
    cluster = processes.cluster
    holder = await _hold_preparation(cluster.source_url)
    await control.start(await cluster.source(), cluster.target_url)
    await cluster.wait_phase(Phase.PREPARATION)
    await _acknowledged(cluster, 3)
    old = await processes.leader()
    await processes.kill(old)
    await holder.close()
    status, _ = await processes.finish(old)
    assert status["coordinator"] != old and status["copy"]["verified"] is True, status
    assert status["dropped"] == []  # it had acknowledged before it died
    assert await _registered_in(cluster.target_url) == set(processes.agents) - {old}


@pytest.mark.parametrize("who", ["coordinator", "participant"])
async def test_an_agent_killed_in_copying_costs_no_write(processes: Processes, who: str) -> None:
    await processes.start(SPARK_IN_THE_FREEZE)
    cluster = processes.cluster
    await control.start(await cluster.source(), cluster.target_url)
    await cluster.wait_phase(Phase.COPYING)
    leader = await processes.leader()
    victim = leader if who == "coordinator" else next(n for n in processes.agents if n != leader)
    await processes.kill(victim)
    status, target = await processes.finish(victim)
    assert status["copy"]["verified"] is True, status
    if who == "coordinator":
        assert status["coordinator"] != victim, status
    # the live ones moved to the target and serve from it; the dead one is not counted there
    assert await _registered_in(cluster.target_url) == set(processes.agents) - {victim}
    for node_id in set(processes.agents) - {victim}:
        writer = cluster.writers[node_id]
        assert (await target.get(writer.ephemeral)) is not None
