"""A store that stops answering mid-migration (issue 17): the target, etcd or Oxia, stalled by
SIGSTOP. In SYNCING (no write is held) the coordinator waits for it and runs another pass,
failing only past ``coordinator.outage_timeout``; inside the freeze (every write held) it fails
once the target has been silent for ``coordinator.participant_timeout``, and the writes go on in
the source."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from metashift.coordinator import control
from metashift.migration.phase import Phase
from metashift_lab.sample_tree import generate
from metashift_lab.servers import LocalEtcd, LocalOxia
from tests.cluster import Cluster
from tests.harness import Gateways, eventually, stop_process_group
from tests.migration_support import copy_job_paused, eventually_status, finish_and_check, hold_preparation

pytestmark = pytest.mark.timeout(900)

#: The target's calls give up after 2 s (default 10): a stall shows quickly.
QUICK = "?timeout=2"


#: The target server of a test: etcd, or Oxia (four shards).
Server = LocalEtcd | LocalOxia


@contextmanager
def _stalled(server: Server) -> Iterator[None]:
    """The server stopped by SIGSTOP (connections stay open, nothing answers; every thread seen
    stopped before the body runs), SIGCONT on the way out."""
    assert server.process is not None
    try:
        stop_process_group(server.process.pid)
        yield
    finally:
        os.killpg(server.process.pid, signal.SIGCONT)


def _target_url(server: Server) -> str:
    return f"{server.url}/target{QUICK}"


async def _cluster(gateways: Gateways, zk_url: str, server: Server, settings: dict[str, Any]) -> Cluster:
    cluster = Cluster(gateways, zk_url, _target_url(server))
    await generate(await cluster.source(), 10, seed=4, ephemerals=False)
    await cluster.start(brokers=2, bookies=1, settings=settings)
    await cluster.start_writers()
    return cluster


async def _stall_in_pass_1(cluster: Cluster, server: Server, seconds: float) -> None:
    await eventually_status(cluster, lambda s: (s["copy"] or {}).get("stage", "").startswith("pass 1"))
    with copy_job_paused():  # pass 1 cannot end before the stall begins
        stop_process_group(server.process.pid)  # type: ignore[union-attr]
    try:
        await asyncio.sleep(seconds)
    finally:
        os.killpg(server.process.pid, signal.SIGCONT)  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["etcd", "oxia"])
async def test_a_target_stall_in_syncing_costs_a_pass_not_the_migration(gateways: Gateways, zk_url: str,
                                                                        fresh_servers: Any, kind: str) -> None:
    server = fresh_servers.of(kind)
    cluster = await _cluster(gateways, zk_url, server, {})
    try:
        await control.start(await cluster.source(), cluster.target_url)
        await _stall_in_pass_1(cluster, server, 12.0)
        status = await finish_and_check(cluster, Phase.COMPLETED)
        assert status["copy"]["verified"] is True and status["copy"]["passes"] >= 2, status
    finally:
        await cluster.close()


async def test_an_outage_in_syncing_past_outage_timeout_fails(gateways: Gateways, zk_url: str,
                                                             fresh_servers: Any) -> None:
    server = fresh_servers.etcd()
    cluster = await _cluster(gateways, zk_url, server, {"coordinator.outage_timeout": 3.0})
    try:
        await control.start(await cluster.source(), cluster.target_url)
        stall = asyncio.ensure_future(_stall_in_pass_1(cluster, server, 40.0))
        try:
            status = await cluster.wait_phase(Phase.FAILED, Phase.COMPLETED)
        finally:
            await stall
        assert status["phase"] == "FAILED", status
        assert "did not answer" in status["reason"] and "coordinator.outage_timeout" in status["reason"], status
        await finish_and_check(cluster, Phase.FAILED)
    finally:
        await cluster.close()


@pytest.mark.parametrize("kind", ["etcd", "oxia"])
async def test_a_target_silent_inside_the_freeze_fails_quickly_and_writes_go_on_in_the_source(
    gateways: Gateways, zk_url: str, fresh_servers: Any, kind: str
) -> None:
    server = fresh_servers.of(kind)
    cluster = await _cluster(gateways, zk_url, server, {"coordinator.prepare_timeout": 300.0})
    try:
        holder = await hold_preparation(cluster)
        await control.start(await cluster.source(), cluster.target_url)
        await eventually_status(cluster, lambda s: sum(p["acknowledged"] for p in s["participants"]) == 3,
                                within=300)
        with _stalled(server):
            await holder.close()  # COPYING now: the last delta cannot reach the target
            status = await cluster.wait_phase(Phase.FAILED, Phase.COMPLETED)
            assert status["phase"] == "FAILED", status
            assert "inside the freeze (coordinator.participant_timeout)" in status["reason"], status
            # released to the source while the target is still silent
            await eventually(cluster.all_on_source, within=60, what="agents back on the source")
            await cluster.writes_continue()
        await finish_and_check(cluster, Phase.FAILED)
    finally:
        await cluster.close()
