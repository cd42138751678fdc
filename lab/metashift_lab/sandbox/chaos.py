"""One chaos run: the sandbox's migration (agents as processes, writers, the report's checks) with
one fault from a ``FaultPlan``, plus register clients on both protocols (``metashift.client`` and
kazoo through each agent's ZooKeeper front) recording a history for the linearizability check,
and a final read of every register where the cluster then lives. The checker itself is test code
(``tests/linearizability.py``); ``bench/chaos.py`` runs many of these and judges them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from metashift.migration import paths
from metashift.migration.phase import Phase
from metashift.stores import MetadataStoreError, open_store
from metashift_lab.agents import AgentProcess, log_entries
from metashift_lab.netns import IsolatedNode
from metashift_lab.servers import free_port

from .faults import FaultInjector, FaultPlan, say
from .history import OK, READ, History
from .options import Options
from .registers import REGISTER_ROOT, RegisterClient, register_paths
from .report import SandboxReport
from .run import Sandbox
from .zk_registers import ZkRegisterClient

#: Longest a migration may take before the run calls it stuck (seconds).
MIGRATION_LIMIT = 900.0
#: Seconds a call of the run's own source store may wait for ZooKeeper to come back.
SOURCE_TIMEOUT = 120.0
#: How many registers the history covers.
REGISTERS = 6


def gate_intervals(logs: list[str]) -> list[tuple[float, float]]:
    """Every agent's write-gate-closed intervals (wall clock, s) from its JSON log; a gate still
    closed at the end of a log (a killed agent) closes at its last line."""
    out = []
    for text in logs:
        closed: float | None = None
        last = 0.0
        for ts, msg in log_entries(text):
            last = ts
            if msg.startswith("write gate closed") and closed is None:
                closed = ts
            elif closed is not None and msg.startswith(("write gate open", "migration completed",
                                                          "migration rolled back")):  # fmt: skip
                out.append((closed, ts))
                closed = None
        if closed is not None:
            out.append((closed, last))
    return out


def longest_freeze(intervals: list[tuple[float, float]]) -> float | None:
    """The longest stretch (s) during which some agent's gate was closed (their union)."""
    if not intervals:
        return None
    longest = 0.0
    start, end = sorted(intervals)[0]
    for a, b in sorted(intervals):
        if a > end:
            longest, start = max(longest, end - start), a
        end = max(end, b)
    return max(longest, end - start)


@dataclass
class ChaosSandbox(Sandbox):
    """A sandbox run with a fault and a recorded history."""

    def __init__(self, options: Options, plan: FaultPlan, *, verify_tree: bool = False) -> None:
        super().__init__(options)
        self.plan = plan
        self.verify_tree = verify_tree
        self.history = History()
        self.register_keys = register_paths(REGISTERS)
        self.registers: list[RegisterClient] = []
        self.zk_registers: list[ZkRegisterClient] = []
        self.injector = FaultInjector(self, plan)
        self._made: list[str] = []
        self.node: IsolatedNode | None = None
        """``partition-agent``: the node of its own (a network namespace) one agent runs on."""
        self.isolated = ""
        self.zk_reach: dict[str, str] = {}
        """Where the kazoo registers reach an agent's ZooKeeper front when it is not ``zk_listen``
        (the isolated agent's, inside its node: through a proxy that is never cut)."""
        self.restart_after_abort = False
        self.came_back = False
        """A reverse migration (target -> source) completed: the cluster lives on its source again."""
        self.first_outcome = ""
        self.fault_error = ""
        self._lives: Any = None
        #: restarts of the servers happen here: a server dies with the thread that started it
        self.server_thread = ThreadPoolExecutor(1, thread_name_prefix="servers")

    def _agent(self, node_id: str, role: str) -> AgentProcess:
        agent = super()._agent(node_id, role)
        agent.zk_listen = f"127.0.0.1:{free_port()}"  # the kazoo registers reach it there
        self._made.append(node_id)
        if self.plan.fault == "partition-agent" and len(self._made) - 1 == self.plan.victim % self._agent_count():
            self._isolate(agent)
        if self.plan.spark_in_freeze:
            agent.coordinator_settings["spark_delta_threshold"] = 0
        return agent

    def _agent_count(self) -> int:
        return self.options.brokers + self.options.bookies

    def _isolate(self, agent: AgentProcess) -> None:
        """``agent`` on a node of its own, whose links to both stores ``partition-agent`` cuts."""
        assert self.source_server is not None and self.target_server is not None and agent.zk_listen
        self.node = IsolatedNode.of_urls(self.source_server.url, self.target_server.url).start()
        agent.command_prefix = tuple(self.node.command([]))
        self.zk_reach[agent.node_id] = self.node.expose(int(agent.zk_listen.rsplit(":", 1)[1]))
        self.isolated = agent.node_id
        say(f"agent {agent.node_id} runs on a node of its own ({self.node.namespace.name})")

    def _zookeeper_front(self, agent: AgentProcess) -> str | None:
        return self.zk_reach.get(agent.node_id, agent.zk_listen)

    async def _more_clients(self) -> None:
        assert self.source is not None and self.source_server is not None
        # the run's own view of the source waits through a restart of its server (a read is
        # retried on the next connection until its deadline), so that following the migration
        # survives it
        self.stores.append(self.source)
        self.source = await open_store(f"{self.source_server.url}?timeout={SOURCE_TIMEOUT:g}")
        await self.source.put(REGISTER_ROOT, b"", expected_version=-1)
        for i, agent in enumerate(self.agents):
            seed = self.plan.seed * 1000 + i
            grpc = RegisterClient(f"{agent.node_id}-g", agent.node_id, agent.address, self.history,
                                  self.register_keys, seed)  # fmt: skip
            await grpc.connect()
            grpc.start()
            self.registers.append(grpc)
            assert agent.zk_listen, "every chaos agent serves ZooKeeper's protocol"
            reach = self._zookeeper_front(agent)
            assert reach is not None
            zk = ZkRegisterClient(f"{agent.node_id}-z", agent.node_id, reach, self.history, self.register_keys,
                                  seed + 500)  # fmt: skip
            await asyncio.to_thread(zk.connect)
            zk.start()
            self.zk_registers.append(zk)
        say(f"{2 * len(self.agents)} register clients on {len(self.register_keys)} keys (gRPC and ZooKeeper)")

    async def coordinator_name(self) -> str | None:
        assert self.source is not None
        with contextlib.suppress(MetadataStoreError, ValueError, KeyError):
            got = await self.source.get(paths.LEADER)
            if got is not None:
                return str(json.loads(got[0])["nodeId"])
        return None

    async def abandon_clients_of(self, node_id: str) -> None:
        """Its agent was killed: its clients stop where they are (what they had in flight stays
        unknown); their acknowledged writes must survive all the same."""
        for c in self.clients:
            if c.node_id == node_id:
                c.stopped_early = True
                await c.abandon()
        for g in self.registers:
            if g.node_id == node_id:
                await g.abandon()
        for z in self.zk_registers:
            if z.node_id == node_id:
                z.abandon()

    async def run(self) -> SandboxReport:
        r = self.report
        await self.setup()
        fault = asyncio.get_running_loop().create_task(self.injector.run(epoch=1), name="fault")
        try:
            frozen = await asyncio.wait_for(self._migrate(), MIGRATION_LIMIT)
            self.first_outcome = r.phase
            try:
                await fault
            except Exception as e:  # the fault's own failure is reported, the run goes on
                self.fault_error = f"{type(e).__name__}: {e}"
            if self.restart_after_abort and r.phase == Phase.FAILED.value:
                say("aborted as planned: starting again")
                try:
                    frozen = await asyncio.wait_for(self._migrate(), MIGRATION_LIMIT)
                except MetadataStoreError as e:
                    r.reason = f"{r.reason}; the new start was refused: {e}"
            if self.plan.fault == "reverse" and r.phase == Phase.COMPLETED.value:
                frozen = await asyncio.wait_for(self._migrate_back(), MIGRATION_LIMIT)
        except TimeoutError:
            r.phase, r.reason = "STUCK", f"no COMPLETED nor FAILED within {MIGRATION_LIMIT:g}s"
            frozen = None
        finally:
            if not fault.done():
                fault.cancel()
                with contextlib.suppress(BaseException):
                    await fault
        await self._keep_writing()
        await self._stop_clients()
        self._lap("after")
        await self._final_reads()
        await self._check(frozen)
        self._lap("check")
        r.seconds = time.monotonic() - self._started
        return r

    async def _migrate_back(self) -> tuple[float, float] | None:
        """The way back: from the target, where the cluster now lives, to the source emptied
        first (``--clean-target``), with the same agents and every client writing on."""
        assert self.source_server is not None and self.target_server is not None
        say(f"completed as planned: migrating back, {self.target_name} -> {self.source_name} (emptied first)")
        home = await open_store(f"{self.target_server.url}?timeout={SOURCE_TIMEOUT:g}")
        self.stores.append(home)
        self.injector.landed = "after COMPLETED"
        frozen = await self._migrate(home, self.source_server.url, clean_target=True)
        self.came_back = self.report.phase == Phase.COMPLETED.value
        return frozen

    def _lives_on(self) -> tuple[str, str]:
        assert self.source_server is not None
        if self.came_back:
            return self.source_server.url, f"{self.source_name} (back from {self.target_name})"
        return super()._lives_on()

    async def _stop_clients(self) -> None:
        await super()._stop_clients()
        for g in self.registers:
            await g.stop()
        await asyncio.gather(*(asyncio.to_thread(z.stop) for z in self.zk_registers))

    async def _final_reads(self) -> None:
        """Every register read where the cluster lives, after everyone stopped: the history's last
        word (an acknowledged write lost there makes it non-linearizable)."""
        url = self._lives_on()[0]
        store = self._lives = await open_store(f"{url}?timeout={SOURCE_TIMEOUT:g}", watch=False, create_root=False)
        self.stores.append(store)
        for key in self.register_keys:
            op = self.history.invoke("final-read", key, READ)
            try:
                op.ok_get(await store.get(key))
            except MetadataStoreError as e:
                op.failed(e)
        self.history.finish()

    async def _check(self, frozen: tuple[float, float] | None) -> None:
        await super()._check(frozen)
        for path, value in self.injector.bypass_acked.items():
            got = await self._lives.get(path)
            if got is None or got[0] != value:
                self.report.lost.append(f"{path}: acknowledged {value!r}, found {got[0] if got else None!r}")
                self.report.writes_lost += 1

    async def _verify_tree(self) -> None:
        if self.verify_tree:
            await super()._verify_tree()

    async def cleanup(self) -> None:
        for z in self.zk_registers:
            z.abandon()
        await asyncio.gather(*(g.abandon() for g in self.registers), return_exceptions=True)
        await super().cleanup()
        if self.node is not None:
            self.node.stop()
        self.server_thread.shutdown(wait=False)

    def row(self) -> dict[str, Any]:
        """What the chaos table shows of this run (the linearizability verdict is added by the
        checker)."""
        r = self.report
        freeze = longest_freeze(gate_intervals([a.log_tail(chars=50_000_000) for a in self.agents]))
        writes = [op for op in self.history.ops if op.f != READ and op.status == OK and op.complete is not None]
        slowest = max(((op.complete or 0) - op.invoke for op in writes), default=0) / 1e6
        held = max([r.write_hold_ms.get("max", 0.0), r.write_ms.get("max", 0.0), slowest])
        return {
            "seed": self.plan.seed, "fault": self.plan.fault, "phase": self.plan.phase,
            "landed": self.injector.landed or "-", "victim": self.injector.victim or None,
            "replicas": self.options.replicas, "election_s": self.injector.election_s,
            "outcome": r.phase, "reason": r.reason, "first_outcome": self.first_outcome,
            "freeze_s": None if freeze is None else round(freeze, 3), "slowest_write_ms": round(held, 1),
            "acked": r.writes_acknowledged + len(writes), "lost": r.writes_lost, "lost_writes": r.lost[:10],
            "ephemerals_missing": r.ephemerals_missing, "operations": len(self.history),
            "unknown": self.history.count("unknown"), "tree_verified": r.tree_verified, "fault_error": self.fault_error,
            "coordinator_verified": r.coordinator_verified, "seconds": round(r.seconds, 1),
            "plan": self.plan.to_dict(), "work_dir": r.work_dir,
        }  # fmt: skip
