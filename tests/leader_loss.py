"""Test support for a migration on replicated stores whose leaders are killed in its phases: the
agent processes and everything that writes through them (writers that remember each acknowledged
write, register clients recording a history on both protocols, BookKeeper's ledger-id generator
on kazoo through the agents' ZooKeeper fronts), the kills (each one's phase, victim and the
election after it, measured), and what the run is judged by at its end."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient

from metashift.client import connect
from metashift.migration.flag import MigrationFlag, read_flag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStoreError, Store, open_store
from metashift_lab.agents import AgentProcess, log_entries
from metashift_lab.linearizability.checker import check
from metashift_lab.replicated import ReplicatedStore
from metashift_lab.sandbox.chaos import longest_freeze
from metashift_lab.sandbox.history import READ, History
from metashift_lab.sandbox.registers import REGISTER_ROOT, RegisterClient, register_paths
from metashift_lab.sandbox.zk_registers import ZkRegisterClient
from tests.agent_processes import Agents
from tests.cluster import Cluster, Writer
from tests.harness import eventually
from tests.ledger_id_generators import KazooLongLedgerIdGenerator
from tests.replicated_stores import Election

#: Where the replicated stores' members are killed, waited for and started again: one thread that
#: lives as long as the test process, since a member dies with the thread that started it
#: (``processes``' PR_SET_PDEATHSIG) and the stores are the session's, shared with later tests.
SERVERS = ThreadPoolExecutor(1, thread_name_prefix="leader-loss-servers")
#: Seconds a write of the writers may be held (the agents' ``gate.hold_timeout`` is 60 s).
WRITE_TIMEOUT = 60.0
#: Seconds a call of the test's own stores may take (``?timeout=``).
OWN_TIMEOUT = 60
#: How many registers the history covers.
REGISTERS = 4


@dataclass
class Kill:
    """One leader SIGKILLed: where, when, and the election after it."""

    phase: str
    """The phase the flag was in when the leader died (held there; checked after the election)."""
    side: str
    """``source`` or ``target``."""
    kind: str
    election: Election
    at: float
    """Wall clock of the kill."""

    def line(self) -> str:
        return (f"{self.side} ({self.kind}) leader, member {self.election.lost}, killed in {self.phase}: member "
                f"{self.election.elected} led and every member served {self.election.seconds:.2f}s later")


@dataclass
class Killed:
    """A leader just SIGKILLed, its successor not awaited yet."""

    phase: Phase
    side: str
    store: ReplicatedStore
    path: str
    lost: int
    at: float
    started: float
    """``time.monotonic()`` at the kill."""


@dataclass
class LedgerIds:
    """BookKeeper's ``LongZkLedgerIdGenerator`` on kazoo clients through agents' ZooKeeper fronts,
    creating ledger ids all along; every id a client was handed out is kept."""

    fronts: list[str]
    handed_out: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _clients: list[KazooClient] = field(default_factory=list)

    def start(self) -> None:
        for front in self.fronts:
            client = KazooClient(hosts=front, timeout=30, connection_retry={"max_tries": -1})
            client.start(timeout=30)
            self._clients.append(client)
            thread = threading.Thread(target=self._run, args=(client,), name=f"ledger ids {front}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _run(self, client: KazooClient) -> None:
        generator = KazooLongLedgerIdGenerator(client)
        while not self._stop.is_set():
            try:
                self.handed_out.append(generator.generate_ledger_id())
            except Exception as e:  # no id handed out (or one whose outcome is unknown: never used)
                self.errors.append(f"{type(e).__name__}: {e}")
                self._stop.wait(0.2)
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()

    def twice(self) -> list[int]:
        seen: set[int] = set()
        return sorted({i for i in self.handed_out if i in seen or seen.add(i)})  # type: ignore[func-returns-value]


class LeaderLossRun:
    """One migration between two replicated stores with agent processes, its clients, its kills."""

    def __init__(self, agents: Agents, source: ReplicatedStore, source_url: str, target: ReplicatedStore,
                 target_url: str) -> None:  # fmt: skip
        self.agents = agents
        self.source, self.target = source, target
        self.source_url, self.target_url = source_url, target_url
        """What the agents and the flag are given."""
        # the test's own view of the stores waits out elections and a loaded machine (an open
        # took more than the default 10 s at load 40); the agents keep the default
        self.cluster = Cluster(None, with_timeout(source_url), with_timeout(target_url))  # type: ignore[arg-type]
        self.history = History()
        self.keys = register_paths(REGISTERS)
        self.registers: list[RegisterClient] = []
        self.zk_registers: list[ZkRegisterClient] = []
        self.ledger_ids: LedgerIds | None = None
        self.kills: list[Kill] = []
        self.restored: list[tuple[ReplicatedStore, int]] = []
        """Members killed and not started again yet."""

    @property
    def processes(self) -> list[AgentProcess]:
        return self.agents.started

    async def start(self, participant_timeout: float) -> None:
        """The agents (two brokers, a bookie), a writer, two register clients each, the ledger ids."""
        source = await self.cluster.source()
        await source.put(REGISTER_ROOT, b"", expected_version=-1)
        for node_id, role in (("broker-1", "broker"), ("broker-2", "broker"), ("bookie-1", "bookie")):
            await self.agents.start(self.source_url, node_id, role, participant_timeout=participant_timeout)
        for i, agent in enumerate(self.processes):
            writer = Writer(agent.node_id, await connect(agent.address), timeout=WRITE_TIMEOUT)
            await writer.start()
            self.cluster.writers[agent.node_id] = writer
            grpc = RegisterClient(f"{agent.node_id}-g", agent.node_id, agent.address, self.history, self.keys, i)
            await grpc.connect()
            grpc.start()
            self.registers.append(grpc)
            assert agent.zk_listen
            zk = ZkRegisterClient(f"{agent.node_id}-z", agent.node_id, agent.zk_listen, self.history, self.keys,
                                  100 + i)  # fmt: skip
            await asyncio.to_thread(zk.connect)
            zk.start()
            self.zk_registers.append(zk)
        self.ledger_ids = LedgerIds([a.zk_listen or "" for a in self.processes[1:]])
        await asyncio.to_thread(self.ledger_ids.start)

    # ---- kills ----------------------------------------------------------------------------------

    async def kill_leader(self, side: str, path: str, phase: Phase, then: Callable[[], None] | None = None) -> Kill:
        """``kill``, then ``elected``."""
        return await self.elected(await self.kill(side, path, phase, then))

    async def kill(self, side: str, path: str, phase: Phase, then: Callable[[], None] | None = None) -> Killed:
        """SIGKILL the leader of ``side``'s store (for ``path``'s shard on Oxia) while the flag is in
        ``phase`` (the caller holds it there), and call ``then`` right after."""
        store = self.source if side == "source" else self.target
        at, started = time.time(), time.monotonic()
        lost = await asyncio.get_running_loop().run_in_executor(SERVERS, store.kill_leader, path)
        if then is not None:
            then()
        self.restored.append((store, lost))
        return Killed(phase, side, store, path, lost, at, started)

    async def elected(self, killed: Killed) -> Kill:
        """Wait (bounded) for the store's next leader, every running member serving. The flag read
        then must still be in the kill's phase or have left it after the kill: it landed there."""
        store = killed.store
        elected = await asyncio.get_running_loop().run_in_executor(
            SERVERS, lambda: store.wait_leader(killed.path, other_than=killed.lost))
        election = Election(killed.lost, elected, time.monotonic() - killed.started)
        kill = Kill(killed.phase.value, killed.side, store.kind, election, killed.at)
        flag = await self._flag_now()
        assert flag is not None and (flag.phase is killed.phase or flag.phase_since >= killed.at * 1000), (
            f"the {killed.side}'s leader was to die in {killed.phase.value}, but the flag had left it before: {flag}")
        self.kills.append(kill)
        print(f"leader loss: {kill.line()}", flush=True)
        return kill

    async def _flag_now(self) -> MigrationFlag | None:
        """The flag (the source may still be electing: read it again until it answers, bounded)."""
        source = await self.cluster.source()
        for _ in range(600):
            with contextlib.suppress(MetadataStoreError):
                return await read_flag(source)
            await asyncio.sleep(0.1)
        raise AssertionError("the source never answered after the kill")

    async def restart_killed(self, store: ReplicatedStore | None = None) -> None:
        """Start the members killed so far (of ``store`` only, when given) again; wait till they serve."""
        loop = asyncio.get_running_loop()
        again = [r for r in self.restored if store is None or r[0] is store]
        for item in again:
            owner, index = item
            await loop.run_in_executor(SERVERS, owner.restart, index)
            self.restored.remove(item)
        for owner in {id(s): s for s, _ in again}.values():
            await loop.run_in_executor(SERVERS, owner.wait_serving)

    def pause_target(self) -> list[int]:
        """SIGSTOP every running member of the target (connections stay open, nothing answers)."""
        paused = [i for i, m in enumerate(self.target.members) if m.running]
        for i in paused:
            self.target.members[i].pause()
        return paused

    def resume_target(self, paused: list[int]) -> None:
        for i in paused:
            self.target.members[i].resume()

    # ---- the end --------------------------------------------------------------------------------

    async def acknowledged(self, epoch: int) -> int:
        """How many participants acknowledged ``epoch``."""
        return sum(1 for p in (await self.cluster.status())["participants"] if p["acknowledged"] == epoch)

    async def stop_clients(self) -> None:
        await self.cluster.writes_continue()
        await self.cluster.stop_writers()
        for g in self.registers:
            await g.stop()
        await asyncio.gather(*(asyncio.to_thread(z.stop) for z in self.zk_registers))
        if self.ledger_ids is not None:
            await asyncio.to_thread(self.ledger_ids.stop)

    async def final_reads(self, lives: Store) -> None:
        """Every register read where the cluster lives: the history's last word."""
        for key in self.keys:
            op = self.history.invoke("final-read", key, READ)
            try:
                op.ok_get(await lives.get(key))
            except MetadataStoreError as e:
                op.failed(e)
        self.history.finish()

    def verdict(self) -> Any:
        return check(self.history.ops)

    def freezes(self) -> tuple[float | None, list[tuple[float, float]], list[tuple[float, float]]]:
        """The longest freeze (s: the union of the agents' gates closed by a migration's
        PREPARATION, until they opened), every freeze interval, and every other stretch a gate was
        closed (an agent's lease: no heartbeat got through while the source elected)."""
        freezes: list[tuple[float, float]] = []
        holds: list[tuple[float, float]] = []
        for agent in self.processes:
            frozen, held = _gate_closures(agent.log_path.read_text())
            freezes += frozen
            holds += held
        return longest_freeze(freezes), freezes, holds

    def logs(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {a.node_id}\n{a.log_tail(chars)}" for a in self.processes)

    async def close(self) -> None:
        if self.ledger_ids is not None:
            self.ledger_ids._stop.set()
        for z in self.zk_registers:
            z.abandon()
        await asyncio.gather(*(g.abandon() for g in self.registers), return_exceptions=True)
        await self.cluster.close()


def _gate_closures(log: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """An agent's JSON log's write-gate-closed intervals (wall clock, s): those begun in a frozen
    phase (PREPARATION, COPYING: the freeze), and the others (``gate_intervals``' ends)."""
    frozen: list[tuple[float, float]] = []
    held: list[tuple[float, float]] = []
    phase, closed, in_freeze, last = "", None, False, 0.0
    for ts, msg in log_entries(log):
        last = ts
        if msg.startswith("migration phase "):
            phase = msg.split()[2]
        elif msg.startswith("write gate closed") and closed is None:
            closed, in_freeze = ts, phase in (Phase.PREPARATION.value, Phase.COPYING.value)
        elif closed is not None and msg.startswith(("write gate open", "migration completed", "migration rolled back")):
            (frozen if in_freeze else held).append((closed, ts))
            closed = None
    if closed is not None:
        (frozen if in_freeze else held).append((closed, last))
    return frozen, held


def with_timeout(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}timeout={OWN_TIMEOUT}"


async def open_lives(url: str) -> Store:
    """A store on ``url`` for the end's reads (no watches, no root made)."""
    return await open_store(with_timeout(url), watch=False, create_root=False)


async def wait_acknowledged(run: LeaderLossRun, epoch: int, count: int) -> None:
    """Until ``count`` participants acknowledged ``epoch``, or the flag left PREPARATION (failed)."""
    async def enough() -> bool:
        status = await run.cluster.status()
        acked = sum(1 for p in status["participants"] if p["acknowledged"] == epoch)
        return acked >= count or status["phase"] != Phase.PREPARATION.value or status["epoch"] != epoch

    await eventually(enough, within=120, what=f"{count} acknowledgements of epoch {epoch}")
