"""The coordinator's copy job lives only as long as the coordinator's leader lease: a paused
coordinator cannot extend it, so its copy stops writing into the target (Spark and Spark's
workers with it) before another coordinator can take over."""

from __future__ import annotations

import os
import time

import pytest

from metashift.coordinator.copy_runner import CopyRunner
from metashift.sample_tree import generate
from metashift.stores import open_store
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
    assert (outcome.report.get("verify") or {}).get("ok") is True
