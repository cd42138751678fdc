"""The coordinator's copy job lives only as long as the coordinator's leader lease: a paused
coordinator cannot extend it, so its copy stops writing into the target (Spark and Spark's
workers with it) before another coordinator can take over; and its emptying of a failed
migration's target stops at the same fence."""

from __future__ import annotations

import os
import time

import pytest

from metashift.coordinator.cleanup import empty_target, target_paths
from metashift.coordinator.copy_runner import CopyRunner
from metashift.coordinator.driver import Deposed
from metashift.stores import open_store
from metashift_lab.sample_tree import generate
from tests.harness import eventually

pytestmark = pytest.mark.timeout(600)


def _in_session(sid: int) -> list[int]:
    """Every process of session ``sid`` (the job is its session's leader)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry))
    return found


async def test_a_copy_job_ends_itself_and_its_spark_when_the_lease_is_not_renewed(zk_url: str, etcd_url: str) -> None:
    source = await open_store(zk_url)
    try:
        await generate(source, 5, seed=3, ephemerals=False)
    finally:
        await source.close()
    granted = time.monotonic() + 3.0  # never renewed: the coordinator was paused right after
    runner = CopyRunner(zk_url, etcd_url, "local[1]", lease=lambda: granted)
    outcome = await runner.run(lambda stage, done, total: None)
    assert (outcome.ok, outcome.kind) == (False, "LeaseExpired"), outcome
    assert "leader lease ran out" in outcome.error
    assert runner._proc is not None
    sid = runner._proc.pid
    await eventually(lambda: not _in_session(sid), within=30, what="no process of the job's session left")


async def test_a_renewed_lease_lets_the_copy_finish(zk_url: str, etcd_url: str) -> None:
    source = await open_store(zk_url)
    try:
        await generate(source, 2, seed=4, ephemerals=False)
    finally:
        await source.close()
    runner = CopyRunner(zk_url, etcd_url, "local[1]", lease=lambda: time.monotonic() + 1.0)
    outcome = await runner.run(lambda stage, done, total: None)
    assert outcome.ok and outcome.kind == "", outcome
    assert outcome.report is not None and outcome.report.verify is not None and outcome.report.verify.ok


async def test_emptying_a_target_stops_at_the_fence(etcd_url: str) -> None:
    """A coordinator paused while it emptied a failed migration's target deletes nothing more once
    it resumes without its lease: a new migration may be copying there by then."""
    target = await open_store(etcd_url)
    try:
        await generate(target, 2, seed=5, ephemerals=False)
        before = await target_paths(target)
        calls: list[int] = []

        def deposed() -> None:
            calls.append(1)
            raise Deposed("the leader lease ran out: not writing into the target")

        with pytest.raises(Deposed):
            await empty_target(target, deposed)
        assert calls == [1] and await target_paths(target) == before
        assert await empty_target(target, lambda: None) == len(before)
        assert await target_paths(target) == []
    finally:
        await target.close()
