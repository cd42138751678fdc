"""Faults for the chaos run: which one, in which phase, when and for how long, all drawn from one
seed (``FaultPlan.draw``), and the injector that waits for that phase and does it to the sandbox's
processes and stores. The stores' faults strike whatever kind of server the run migrates from or
into (ZooKeeper, etcd, Oxia); on replicated stores (``--replicas`` > 1) a seed also draws a leader
killed and an agent cut off from its stores (``REPLICATED``)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from metashift import processes
from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.flag import read_flag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, MetadataStoreError, StoreUnavailable
from metashift.stores.aio import wait_event
from metashift_lab.agents import AgentProcess
from metashift_lab.netns import IsolatedNode
from metashift_lab.netproxy import BLACKHOLE, PASS
from metashift_lab.replicated import ReplicatedStore

from .history import WRITE, History
from .servers import StoreServer

#: Every fault the chaos run knows.
FAULTS = (
    "none",
    "kill-agent",  # SIGKILL of a participant's agent (not the coordinator's)
    "kill-coordinator",  # SIGKILL of the coordinator's agent
    "stop-agent",  # SIGSTOP of a participant's agent for `duration` seconds, then SIGCONT
    "stop-coordinator",  # the same, to the coordinator's agent
    "source-restart",  # the source's server stopped, down `duration` seconds, started again (was zk-restart)
    "target-stall",  # SIGSTOP of the target's server for `duration` seconds (was etcd-stall)
    "bypass-write",  # a write straight to the source, behind the agents' back
    "abort-restart",  # `migrate abort`, then a new start once the target is clean
    "reverse",  # after COMPLETED, the way back: target -> source (emptied first), clients writing on
)
#: Faults a run does only when asked for (``--fault``): a seed draws from ``FAULTS`` alone, so that
#: the seeds of earlier chaos runs still replay the same plan.
ASKED_ONLY = (
    "target-restart",  # the target's server stopped, down `duration` seconds, started again
    "source-stall",  # SIGSTOP of the source's server for `duration` seconds
)
#: Faults of replicated stores: drawn from a seed only on them (``--replicas`` > 1), so that the
#: seeds of single servers replay the same plan; asked for (``--fault``) only there too.
REPLICATED = (
    "kill-source-leader",  # SIGKILL of the source's leader (Oxia: of the shard of a register), back after `duration`
    "kill-target-leader",  # the same, to the target's leader
    "partition-agent",  # one agent's links to both stores blackholed for `duration` (a node of its own: netns)
)
#: Earlier names of faults (older benchmark tables, docs/benchmarks.md, use them).
RENAMED = {"zk-restart": "source-restart", "etcd-stall": "target-stall"}
PHASES = (Phase.SYNCING.value, Phase.PREPARATION.value, Phase.COPYING.value)
#: How long after the phase begins the fault comes (seconds, drawn uniformly).
DELAYS = {Phase.SYNCING.value: (0.0, 8.0), Phase.PREPARATION.value: (0.0, 0.1), Phase.COPYING.value: (0.0, 0.05)}
#: How long a stop, a stall or an outage lasts (seconds, drawn uniformly).
DURATIONS = {"stop-agent": (1.0, 8.0), "stop-coordinator": (1.0, 8.0), "source-restart": (0.0, 4.0),
             "target-stall": (2.0, 15.0), "target-restart": (0.0, 4.0), "source-stall": (2.0, 15.0),
             "kill-source-leader": (0.0, 8.0), "kill-target-leader": (0.0, 8.0),
             "partition-agent": (1.0, 12.0)}  # fmt: skip
#: How often the injector reads the flag while it waits for its phase, besides when the flag's
#: notification comes.
POLL = 0.25


@dataclass
class FaultPlan:
    """One run's fault, drawn from ``seed``: the same seed gives the same plan (and the same
    workload), so a failing run can be replayed."""

    seed: int
    fault: str
    phase: str
    delay: float
    duration: float = 0.0
    victim: int = 0
    """Which of the candidate agents (by index, modulo their number)."""
    spark_in_freeze: bool = False
    """COPYING carried by a Spark pass (``coordinator.spark_delta_threshold = 0``): it then lasts
    seconds (and so does the freeze); otherwise the freeze's delta goes through the store layer
    in tens of milliseconds, and the fault comes on the flag's notification."""
    replicas: int = 1
    """Members of each store (1: single servers; above, ``REPLICATED``'s faults are drawn too)."""

    @classmethod
    def draw(cls, seed: int, fault: str | None = None, phase: str | None = None,
             spark_in_freeze: bool = False, replicas: int = 1) -> FaultPlan:  # fmt: skip
        rng = random.Random(seed)
        fault = RENAMED.get(fault or "", fault)
        if not fault:
            # single servers: the draw of every earlier chaos run. Replicated stores: half the runs a
            # fault of theirs (what the run is for), half one of the others
            replicated = replicas > 1 and rng.random() < 0.5
            fault = rng.choice(REPLICATED if replicated else FAULTS[1:])
        phase = phase or rng.choice(PHASES)
        known = FAULTS + ASKED_ONLY + REPLICATED
        if fault not in known:
            raise ValueError(f"unknown fault {fault!r}: one of {', '.join(known)}")
        if fault in REPLICATED and replicas == 1:
            raise ValueError(f"{fault} is a fault of replicated stores: it needs --replicas 3 (or more)")
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}: one of {', '.join(PHASES)}")
        delay = round(rng.uniform(*DELAYS[phase]), 3)
        duration = round(rng.uniform(*DURATIONS.get(fault, (0.0, 0.0))), 2)
        return cls(seed, fault, phase, delay, duration, rng.randrange(1000), spark_in_freeze, replicas)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FaultTarget(Protocol):
    """What a fault strikes, and what the injector reads and tells (the chaos run's sandbox)."""

    source: MetadataStore | None
    source_server: StoreServer | None
    target_server: StoreServer | None
    agents: list[AgentProcess]
    node: IsolatedNode | None
    """The node of its own one agent runs on (``partition-agent``), else ``None``."""
    isolated: str
    """That agent's node id."""
    server_thread: ThreadPoolExecutor
    """The thread that starts the servers (a server dies with the thread that started it)."""
    history: History
    register_keys: list[str]
    restart_after_abort: bool
    """Set by ``abort-restart``: the run starts a new migration once the aborted one failed."""

    async def coordinator_name(self) -> str | None:
        """The node id of the agent that coordinates the migration, if one does."""
        ...

    async def abandon_clients_of(self, node_id: str) -> None:
        """Let go of the clients whose agent ``node_id`` is about to die."""
        ...


def say(text: str) -> None:
    print(f"chaos: {text}", file=sys.stderr, flush=True)


@dataclass
class FaultInjector:
    """Waits for the plan's phase in the migration that ``sandbox`` runs, then does the fault."""

    sandbox: FaultTarget
    plan: FaultPlan
    landed: str = ""
    """The phase the fault actually came in (``missed`` when the migration ended before it)."""
    victim: str = ""
    bypass_acked: dict[str, bytes] = field(default_factory=dict)
    election_s: float | None = None
    """A leader killed: seconds from the SIGKILL until the store named a new leader and every
    running member served (``ReplicatedStore.wait_leader``)."""
    started: float = 0.0
    ended: float = 0.0
    _resume: list[Any] = field(default_factory=list)

    async def run(self, epoch: int) -> None:
        plan = self.plan
        if plan.fault == "reverse":
            return  # the sandbox migrates back once the migration completed (``landed`` says so)
        source = self.sandbox.source
        assert source is not None
        moved = asyncio.Event()
        remove = source.add_listener(lambda n: moved.set() if n.path == paths.FLAG else None, under=paths.ROOT)
        try:
            while True:
                moved.clear()
                flag = await self._flag()
                if flag is not None and flag.epoch == epoch and flag.phase.value == plan.phase:
                    break
                if flag is not None and flag.epoch == epoch and flag.phase in (Phase.COMPLETED, Phase.FAILED):
                    break  # the phase came and went between two looks (or never came): go on anyway
                await wait_event(moved, POLL)
        finally:
            remove()
        await asyncio.sleep(plan.delay)
        flag = await self._flag()
        phase = flag.phase if flag is not None else Phase.NOT_STARTED
        if phase in (Phase.COMPLETED, Phase.FAILED):
            self.landed = f"missed ({phase.value})"
            say(f"{plan.fault}: the migration was {phase.value} before it could be done")
            return
        self.landed = phase.value
        self.started = time.monotonic()
        lasting = f", for {plan.duration:g}s" if plan.duration else ""
        say(f"{plan.fault} in {phase.value} ({plan.delay:g}s in{lasting})")
        await getattr(self, "_" + plan.fault.replace("-", "_"))()
        self.ended = time.monotonic()

    async def _flag(self) -> Any:
        assert self.sandbox.source is not None
        try:
            return await read_flag(self.sandbox.source)
        except StoreUnavailable:
            return None

    async def _choose(self, coordinator: bool) -> Any:
        agents = [a for a in self.sandbox.agents if a.running and not a.killed]
        leader = await self.sandbox.coordinator_name()
        pool = [a for a in agents if (a.node_id == leader) == coordinator] or agents
        victim = pool[self.plan.victim % len(pool)]
        self.victim = victim.node_id
        return victim

    async def _none(self) -> None:
        pass

    async def _kill_agent(self, coordinator: bool = False) -> None:
        victim = await self._choose(coordinator)
        say(f"SIGKILL to agent {victim.node_id} (pid {victim.pid})")
        await victim.kill()
        await self.sandbox.abandon_clients_of(victim.node_id)

    async def _kill_coordinator(self) -> None:
        await self._kill_agent(coordinator=True)

    async def _stop_agent(self, coordinator: bool = False) -> None:
        victim = await self._choose(coordinator)
        say(f"SIGSTOP to agent {victim.node_id} (pid {victim.pid}) for {self.plan.duration:g}s")
        victim.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(self.plan.duration)
        finally:
            victim.signal(signal.SIGCONT)

    async def _stop_coordinator(self) -> None:
        await self._stop_agent(coordinator=True)

    async def _source_restart(self) -> None:
        await self._restart(self.sandbox.source_server)

    async def _target_restart(self) -> None:
        await self._restart(self.sandbox.target_server)

    async def _source_stall(self) -> None:
        await self._stall(self.sandbox.source_server)

    async def _target_stall(self) -> None:
        await self._stall(self.sandbox.target_server)

    async def _kill_source_leader(self) -> None:
        await self._kill_leader(self.sandbox.source_server)

    async def _kill_target_leader(self) -> None:
        await self._kill_leader(self.sandbox.target_server)

    async def _kill_leader(self, server: StoreServer | None) -> None:
        """SIGKILL of ``server``'s leader (Oxia: of the shard holding a register the run writes),
        the election timed, the member started again ``duration`` seconds after the kill."""
        assert isinstance(server, ReplicatedStore), "a leader kill needs a replicated store (--replicas)"
        key = self.sandbox.register_keys[self.plan.victim % len(self.sandbox.register_keys)]
        loop = asyncio.get_running_loop()
        lost = await asyncio.to_thread(server.kill_leader, key)
        killed = time.monotonic()
        self.victim = server.members[lost].name
        say(f"SIGKILL to {self.victim}, the leader of {server.kind} (for {key}), back in {self.plan.duration:g}s")
        try:
            elected = await asyncio.to_thread(server.wait_leader, key, other_than=lost)
            self.election_s = round(time.monotonic() - killed, 3)
            say(f"{server.kind}: {server.members[elected].name} leads, {self.election_s:.2f}s after the kill")
            await asyncio.sleep(max(0.0, killed + self.plan.duration - time.monotonic()))
        finally:
            # in the sandbox's server thread: a server dies with the thread that started it
            await loop.run_in_executor(self.sandbox.server_thread, server.restart, lost)

    async def _partition_agent(self) -> None:
        """Every link of the agent on a node of its own to its stores blackholed (nothing goes
        through, nothing is reset) for ``duration``, then healed; the others keep theirs."""
        node = self.sandbox.node
        assert node is not None, "partition-agent runs an agent on a node of its own from the start"
        self.victim = self.sandbox.isolated
        say(f"agent {self.victim} cut off from its stores (blackhole) for {self.plan.duration:g}s")
        await asyncio.to_thread(node.set, BLACKHOLE)
        try:
            await asyncio.sleep(self.plan.duration)
        finally:
            await asyncio.to_thread(node.set, PASS)
            say(f"agent {self.victim}: links healed")

    async def _restart(self, server: StoreServer | None) -> None:
        """``server`` stopped (SIGTERM), down ``duration`` seconds, started again on its port and data."""
        assert server is not None
        say(f"{server.name} stopped for {self.plan.duration:g}s")
        loop = asyncio.get_running_loop()
        # in the sandbox's server thread, which lives as long as the run: a server dies with the
        # thread that started it
        await loop.run_in_executor(self.sandbox.server_thread, server.stop)
        await asyncio.sleep(self.plan.duration)
        await loop.run_in_executor(self.sandbox.server_thread, server.start)

    async def _stall(self, server: StoreServer | None) -> None:
        """``server`` stopped by SIGSTOP (connections stay open, nothing answers) for ``duration``
        (a replicated store: every member)."""
        if isinstance(server, ReplicatedStore):
            say(f"SIGSTOP to every member of {server.name} for {self.plan.duration:g}s")
            server.pause()
            try:
                await asyncio.sleep(self.plan.duration)
            finally:
                server.resume()
            return
        assert server is not None and server.process is not None
        process = server.process
        say(f"SIGSTOP to {server.name} (pid {process.pid}) for {self.plan.duration:g}s")
        processes.signal_group(process, signal.SIGSTOP)
        try:
            await asyncio.sleep(self.plan.duration)
        finally:
            processes.signal_group(process, signal.SIGCONT)

    async def _bypass_write(self) -> None:
        """A register and a path of its own written straight into the source: in SYNCING and
        PREPARATION the coordinator must carry them; in COPYING it must carry them or fail. The
        COMPLETED write is the switch: a write the source acknowledged after it is not the
        cluster's. So a write counts as acknowledged only when the flag, read after the answer on
        the same session (which reads in order), is not yet COMPLETED; otherwise it may have
        come after the switch, and its outcome is unknown."""
        source = self.sandbox.source
        history: History = self.sandbox.history
        assert source is not None
        key = self.sandbox.register_keys[self.plan.victim % len(self.sandbox.register_keys)]
        op = history.invoke("bypass", key, WRITE, f"bypass:{self.plan.seed}".encode())
        try:
            version = (await source.put(key, op.value or b"")).version
            if await self._switched():
                op.unknown("acknowledged by the source after the switch, maybe")
            else:
                op.ok(version)
        except MetadataStoreError as e:
            op.failed(e)
        path, value = f"/sandbox/bypass/seed-{self.plan.seed}", b"written behind the agents' back"
        with contextlib.suppress(MetadataStoreError):
            await source.put(path, value)
            if not await self._switched():
                self.bypass_acked[path] = value

    async def _switched(self) -> bool:
        flag = await self._flag()
        return flag is not None and flag.phase is Phase.COMPLETED

    async def _reverse(self) -> None:
        pass  # done by the sandbox after COMPLETED

    async def _abort_restart(self) -> None:
        assert self.sandbox.source is not None
        with contextlib.suppress(control.MigrationRefused):
            await control.abort(self.sandbox.source)
        self.sandbox.restart_after_abort = True
