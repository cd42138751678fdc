"""Test support: ``metashift agent`` processes with ZooKeeper fronts, and cluster members that
register through them (or around them) as brokers and bookies do, with kazoo (a client nobody
here wrote). A pytest plugin (``conftest.py``): its fixtures are every test's."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from metashift.migration.flag import MigrationFlag, read_flag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore
from metashift_lab.agents import AgentProcess, start_agents, stop_agents
from metashift_lab.cli_runner import run_cli_sync
from metashift_lab.servers import LocalZooKeeper, free_port
from tests.harness import eventually

FORGOTTEN = "127.0.0.1:8081"
BYPASS = (f"broker {FORGOTTEN} is registered through a session no agent holds: restart it onto its agent's "
          "ZooKeeper front first")


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``metashift ARGS`` run to its end (its output captured as text)."""
    return run_cli_sync(*args, timeout=timeout)


class Agents:
    """``metashift agent`` processes of one test, each with a ZooKeeper front."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.started: list[AgentProcess] = []

    async def start(
        self, source_url: str, node_id: str, role: str, participant_timeout: float = 10.0, **fields: Any
    ) -> AgentProcess:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        agent = AgentProcess(
            node_id, role, self.work_dir, source_url, hold_timeout=60.0, prepare_timeout=60.0,
            coordinator_settings={"participant_timeout": participant_timeout}, zk_listen=f"127.0.0.1:{free_port()}",
            **fields,
        )  # fmt: skip
        await start_agents([agent])
        self.started.append(agent)
        return agent


@pytest.fixture
async def agents(tmp_path: Path) -> AsyncIterator[Agents]:
    made = Agents(tmp_path / "agents")
    yield made
    await stop_agents(made.started)


class Member:
    """A kazoo client registered as a broker or bookie registers (and whatever else it holds)."""

    def __init__(self, hosts: str) -> None:
        self.client = KazooClient(hosts=hosts, timeout=30)

    async def start(self, *ephemerals: str) -> Member:
        await asyncio.to_thread(self.client.start, 60)
        for path in ephemerals:
            await self.write(path, b"{}", ephemeral=True)
        return self

    async def write(self, path: str, value: bytes, *, ephemeral: bool = False) -> None:
        def put() -> None:
            if self.client.exists(path):
                self.client.set(path, value)
            else:
                self.client.create(path, value, ephemeral=ephemeral, makepath=True)
        await asyncio.to_thread(put)

    @property
    def session(self) -> str:
        return f"0x{self.client.client_id[0]:x}"

    async def stop(self) -> None:
        await asyncio.to_thread(self.client.stop)
        await asyncio.to_thread(self.client.close)


@pytest.fixture
async def members() -> AsyncIterator[list[Member]]:
    made: list[Member] = []
    yield made
    for member in made:
        with contextlib.suppress(Exception):
            await member.stop()


def hosts_of(zk: LocalZooKeeper, url: str) -> str:
    """kazoo's hosts string for a ``zk://`` URL's chroot on ``zk`` (a member on ZooKeeper directly)."""
    return zk.hosts + url.removeprefix(zk.url)


async def member_cluster(agents: Agents, members: list[Member], source_url: str) -> tuple[AgentProcess, AgentProcess]:
    """broker-1 and bookie-1's agents, with a broker and a bookie registered through them."""
    broker, bookie = (await agents.start(source_url, "broker-1", "broker"),
                      await agents.start(source_url, "bookie-1", "bookie"))
    assert broker.zk_listen and bookie.zk_listen
    members.append(await Member(broker.zk_listen).start(
        "/loadbalance/brokers/127.0.0.1:8080", "/namespace/public/default/0x00000000_0x40000000"))
    members.append(await Member(bookie.zk_listen).start("/ledgers/available/127.0.0.1:3181"))
    return broker, bookie


async def wait_flag(store: MetadataStore, *phases: Phase, within: float = 300.0, epoch: int | None = None
                    ) -> MigrationFlag:
    """The migration flag in ``store`` once in one of ``phases`` (COMPLETED: once released, the
    switch made), of ``epoch`` when given."""
    found: list[MigrationFlag] = []

    async def reached() -> bool:
        flag = await read_flag(store)
        if flag is None or flag.phase not in phases or (epoch is not None and flag.epoch != epoch):
            return False
        if flag.phase is Phase.COMPLETED and not flag.released:
            return False
        found.append(flag)
        return True

    await eventually(reached, within=within, what=f"phase {[p.value for p in phases]}")
    return found[-1]
