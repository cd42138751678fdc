"""What the migration tests share: a seeded source, a participant that never acknowledges, the
leader's name, the end of a migration checked (nothing lost, the clients' ephemerals carried),
status awaited, the copy job paused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from typing import Any

from metashift.migration import paths
from metashift.migration.participants import ParticipantRecord
from metashift.migration.phase import Phase
from metashift.stores import open_store
from metashift_lab.sample_tree import generate
from tests.cluster import Cluster
from tests.harness import eventually


async def seed(cluster: Cluster, topics: int = 10) -> None:
    source = await cluster.source()
    await generate(source, topics, seed=1, ephemerals=False)


async def hold_preparation(cluster: Cluster) -> Any:
    """A participant that never acknowledges (a node registered by hand): PREPARATION lasts until
    it is removed. Returns the store whose session holds it; closing it removes the participant."""
    holder = await open_store(cluster.source_url)
    record = ParticipantRecord("silent-node", "broker", "nowhere")
    await holder.put(paths.PARTICIPANT_PREFIX, record.to_json(), ephemeral=True, sequential=True)
    return holder


async def leader_of(cluster: Cluster) -> str:
    source = await cluster.source()
    got = await source.get(paths.LEADER)
    assert got is not None
    return str(json.loads(got[0])["nodeId"])


async def finish_and_check(cluster: Cluster, expect: Phase) -> dict[str, Any]:
    status = await cluster.wait_phase(Phase.COMPLETED, Phase.FAILED)
    assert status["phase"] == expect.value, status
    await eventually(cluster.all_on_target if expect is Phase.COMPLETED else cluster.all_on_source,
                     within=60, what=f"agents settle after {expect.value}")
    await cluster.writes_continue()
    await cluster.stop_writers()
    lives = await cluster.open(cluster.target_url if expect is Phase.COMPLETED else cluster.source_url)
    assert await cluster.missing_writes(lives) == []
    return status


async def check_writers_carried(cluster: Cluster, lives: Any) -> None:
    """No client's write failed, and every client's ephemeral is in ``lives`` (the store the
    cluster lives on), with its data, still its own through its agent."""
    for writer in cluster.writers.values():
        assert writer.failed == 0, writer.errors
        got = await lives.get(writer.ephemeral)  # carried into the target, still the client's
        assert got is not None and got[0] == writer.node_id.encode() and got[1].ephemeral
        through_agent = await writer.client.get(writer.ephemeral)
        assert through_agent is not None and through_agent[1].created_by_self


async def eventually_status(cluster: Cluster, check: Any, within: float = 420.0) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def holds() -> bool:
        found.update(await cluster.status())
        return bool(check(found))

    await eventually(holds, within=within, what="status")
    return found


def copy_job_pid() -> int | None:
    """The coordinator's copy child of this process (in-process agents), if one runs: the newest
    (a job that reported may still be exiting beside the next pass's)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"metashift.coordinator.copy_job" in cmdline:
            found.append(int(entry))
    return max(found, default=None)


@contextlib.contextmanager
def copy_job_paused() -> Iterator[None]:
    """Hold the running copy (its process group: the job, Spark's JVM and workers) by SIGSTOP, so
    that a full pass cannot end while the test breaks things; SIGCONT on the way out."""
    pid = copy_job_pid()
    assert pid is not None, "no copy job is running"
    os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
