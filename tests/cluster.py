"""A small Pulsar-shaped cluster for migration tests: in-process agents (brokers and bookies), each
with its coordinator candidate, and clients that keep writing through them and remember every
write the agent acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from metashift.cli.agent import run_coordinator
from metashift.coordinator import control
from metashift.migration.phase import Phase
from metashift.stores import (
    BadVersion,
    MetadataStore,
    MetadataStoreError,
    NotFound,
    Store,
    StoreUnavailable,
    open_store,
)
from tests.harness import Gateways, eventually


@dataclass
class Writer:
    """One client of one agent: an ephemeral held all along, a compare-and-set counter, creates
    and sequential ids, each acknowledged write remembered (path -> value)."""

    node_id: str
    client: Any
    acked: dict[str, bytes | None] = field(default_factory=dict)
    """Path -> the value last acknowledged there (``None``: an acknowledged delete)."""
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    ephemeral: str = ""
    timeout: float = 90.0
    """Each write's deadline (seconds): how long it may be held."""
    _inflight: str = ""
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        self.ephemeral = f"/loadbalance/brokers/{self.node_id}"
        await self.client.put(self.ephemeral, self.node_id.encode(), ephemeral=True)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        base = f"/writers/{self.node_id}"
        counter = f"{base}/counter"
        stat = await self.client.put(counter, b"0", expected_version=-1)
        self.acked[counter] = b"0"
        version = stat.version
        i = 0
        while not self._stop.is_set():
            i += 1
            doomed = ""
            try:
                self._inflight = counter
                stat = await self.client.put(counter, str(i).encode(), expected_version=version, timeout=self.timeout)
                version = stat.version
                self.acked[counter] = str(i).encode()
                item = self._inflight = f"{base}/item-{i}"
                await self.client.put(item, b"v%d" % i, expected_version=-1, timeout=self.timeout)
                self.acked[item] = b"v%d" % i
                if i % 5 == 0:
                    seq = await self.client.put(f"/counters/{self.node_id}-", b"s", sequential=True,
                                                timeout=self.timeout)
                    self.acked[seq.path] = b"s"
                if i % 4 == 0 and i > 2 and f"{base}/item-{i - 2}" in self.acked:  # deletions must reach the target
                    doomed = self._inflight = f"{base}/item-{i - 2}"
                    await self.client.delete(doomed, timeout=self.timeout)
                    self.acked[doomed] = None
            except (StoreUnavailable, BadVersion, NotFound) as e:
                # a store outage: the outcome may be unknown (a retried create finds its node, a
                # compare-and-set its version moved): not acknowledged, so not counted; go on
                self.failed += 1
                self.errors.append(repr(e))
                if doomed:  # a delete whose outcome is unknown: the node may or may not be there
                    self.acked.pop(doomed, None)
                got = await self._read(counter)
                if got is not None:  # a compare-and-set whose outcome is unknown may have landed
                    version, self.acked[counter] = got[1].version, got[0]
            except MetadataStoreError as e:
                self.failed += 1
                self.errors.append(repr(e))
                return
            # a broker's pace, not a benchmark's: at 20 ms a writer's agent, store and client
            # took most of a migration test's CPU (the test process 8.7 core-s against 5.2)
            await asyncio.sleep(0.1)

    async def _read(self, path: str) -> Any:
        """The node as the store has it, read again until the store answers (``None`` if never)."""
        for _ in range(100):
            try:
                return await self.client.get(path)
            except StoreUnavailable:
                await asyncio.sleep(0.2)
        return None

    async def stop_now(self) -> None:
        """Stop writing at once: its agent is about to go away. (The client stays open until the
        test ends: a client that closes its session waits until its ephemerals are deleted, which
        during a freeze waits for the gate.)"""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        # the write cut off in flight was admitted by the agent or not: its outcome is unknown
        if self._inflight:
            self.acked.pop(self._inflight, None)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 120)


class Cluster:
    """Agents of one test (``broker-1``.., ``bookie-1``..) in front of ``source_url``."""

    def __init__(self, gateways: Gateways, source_url: str, target_url: str, *, copy_engine: str = "spark") -> None:
        """``copy_engine``: what runs a full pass (``coordinator.copy_engine``): ``store`` for the
        tests of the protocol, where a Spark job's start costs more than the copy of their tree."""
        self.gateways = gateways
        self.source_url = source_url
        self.target_url = target_url
        self.copy_engine = copy_engine
        self.agents: dict[str, Any] = {}
        self.writers: dict[str, Writer] = {}
        self._stores: list[Store] = []

    async def start_agent(self, node_id: str, role: str, *, coordinator: bool = True, **settings: Any) -> Any:
        # heartbeats: an agent whose event loop (this test process's) stalls for most of the timeout
        # holds its writes until it looks again; 10 s rides out a loaded machine (the default is 5)
        flat = {"node_id": node_id, "role": role, "coordinator.prepare_timeout": 30.0, "gate.hold_timeout": 90.0,
                "coordinator.participant_timeout": 10.0, "coordinator.copy_engine": self.copy_engine}
        flat.update(settings)
        agent = await self.gateways.start(self.source_url, flat)
        if coordinator:
            agent.start_companion(run_coordinator)
        self.agents[node_id] = agent
        return agent

    async def start(self, brokers: int = 3, bookies: int = 2, settings: dict[str, Any] | None = None) -> None:
        settings = settings or {}
        for i in range(1, brokers + 1):
            await self.start_agent(f"broker-{i}", "broker", **settings)
        for i in range(1, bookies + 1):
            await self.start_agent(f"bookie-{i}", "bookie", **settings)

    async def start_writers(self) -> None:
        from metashift.client import connect

        for node_id, agent in self.agents.items():
            writer = Writer(node_id, await connect(agent.address))
            await writer.start()
            self.writers[node_id] = writer

    async def stop_writers(self) -> None:
        for writer in self.writers.values():
            await writer.stop()

    async def close_clients(self) -> None:
        for writer in self.writers.values():
            with contextlib.suppress(Exception):
                await writer.client.close()

    async def stop_agent(self, node_id: str) -> None:
        """The agent goes away (its store sessions close: its registration and leadership go)."""
        agent = self.agents.pop(node_id)
        await agent.stop(grace=1.0)
        self.gateways.agents.remove(agent)

    async def open(self, url: str) -> Store:
        store = await open_store(url)
        self._stores.append(store)
        return store

    async def source(self) -> Store:
        return await self.open(self.source_url)

    async def status(self) -> dict[str, Any]:
        source = self._stores[0] if self._stores else await self.source()
        return (await control.status(source)).to_dict()

    async def wait_phase(self, *phases: Phase, within: float = 420.0) -> dict[str, Any]:
        """Poll the status until its phase is one of ``phases``; fail the test otherwise."""
        deadline = time.monotonic() + within
        while True:
            now = await self.status()
            if now["phase"] in {p.value for p in phases}:
                return now
            if time.monotonic() > deadline:
                pytest.fail(f"phase {now['phase']} after {within}s, waiting for {[p.value for p in phases]}: {now}")
            # a broker's pace, not a benchmark's: at 20 ms a writer's agent, store and client
            # took most of a migration test's CPU (the test process 8.7 core-s against 5.2)
            await asyncio.sleep(0.1)

    def all_on_target(self) -> bool:
        """Every agent serves from its target, gate open."""
        return all(
            a.participant.target is not None and a.router.active is a.participant.target and a.gate.is_open
            for a in self.agents.values()
        )

    def all_on_source(self) -> bool:
        """Every agent serves from the source, gate open."""
        return all(a.router.active is a.router.source and a.gate.is_open for a in self.agents.values())

    async def writes_continue(self, more: int = 3) -> None:
        """Wait until every writer has had ``more`` further writes acknowledged."""
        for writer in self.writers.values():
            start = len(writer.acked)
            await eventually(lambda w=writer, s=start: len(w.acked) > s + more, within=60,  # type: ignore[misc]
                             what=f"{writer.node_id} keeps writing")

    async def missing_writes(self, store: MetadataStore) -> list[str]:
        """Acknowledged writes ``store`` does not hold with the acknowledged value."""
        missing = []
        for writer in self.writers.values():
            for path, value in writer.acked.items():
                got = await store.get(path)
                if (got[0] if got else None) != value:
                    missing.append(f"{path}: acked {value!r}, found {got[0] if got else None!r}")
        return missing

    async def close(self) -> None:
        for writer in self.writers.values():
            writer._stop.set()
        for writer in self.writers.values():
            if writer._task is not None:
                writer._task.cancel()
                with contextlib.suppress(BaseException):
                    await writer._task
        await self.close_clients()
        for store in self._stores:
            with contextlib.suppress(Exception):
                await store.close()
