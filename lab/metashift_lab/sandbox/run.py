"""``metashift sandbox``: a whole migration on this machine, end to end.

A local server of the source's kind and one of the target's (``--source``, ``--target``:
ZooKeeper, etcd or Oxia; ZooKeeper -> etcd by default), a Pulsar-shaped tree on the source, one
``metashift agent`` process per broker and bookie, simulated clients writing through them all the
time, the migration started and followed the way ``metashift migrate start --wait`` does, a few
more seconds of writes after the switch, then the checks: every acknowledged write where the
cluster then lives, the clients' ephemerals carried, the coordinator's verification, and the
untouched tree compared between the two stores by ``metashift verify``. Everything it started
goes away at the end, on Ctrl-C and on SIGTERM too. (``command``: the command itself;
``options``: its settings.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from pathlib import Path

from metashift import processes
from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.flag import read_flag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, MetadataStoreError, Notification, StoreUnavailable, open_store
from metashift_lab.agents import AgentProcess, AgentStartError, freeze_window, start_agents, stop_agents
from metashift_lab.cli_runner import run_cli_json
from metashift_lab.sample_tree import BUNDLES_PER_NAMESPACE, TOPICS_PER_NAMESPACE, generate
from metashift_lab.servers import ServerStartError, free_port

from .beside_copy import copy_beside
from .clients import WRITER_ROOT, SimClient, carried, missing
from .options import Options, generate_progress, progress_line, say
from .report import SandboxReport, percentiles, split_timings
from .servers import STORE_NAMES, StoreServer, local_server, store_server

#: How often the flag is read while following the migration.
FOLLOW_SECONDS = 0.25
#: After the switch: writes every live client must still get acknowledged (within a minute).
MORE_WRITES = 3


def bundles(topics: int) -> list[str]:
    """The bundle-ownership paths of the generated tree (``sample_tree``'s namespaces)."""
    namespaces = max(1, -(-topics // TOPICS_PER_NAMESPACE))
    tenants = max(1, namespaces // 4)
    out = []
    for ns_index in range(namespaces):
        for k in range(BUNDLES_PER_NAMESPACE):
            lo, hi = k * (1 << 32) // BUNDLES_PER_NAMESPACE, (k + 1) * (1 << 32) // BUNDLES_PER_NAMESPACE
            out.append(f"/namespace/tenant-{ns_index % tenants}/ns-{ns_index}/0x{lo:08x}_0x{min(hi, 0xFFFFFFFF):08x}")
    return out


#: Seconds the final checks' own store connection waits for a store (connect and each call).
CHECK_TIMEOUT = 120.0


class Sandbox:
    """One sandbox run: servers, agents, writers, the migration and the checks."""

    #: What ends a run with one line on stderr and exit 1 (instead of a traceback).
    start_errors: tuple[type[Exception], ...] = (AgentStartError, ServerStartError, MetadataStoreError)

    def __init__(self, options: Options) -> None:
        self.options = options
        self.report = SandboxReport(topics=options.topics, brokers=options.brokers, bookies=options.bookies,
                                    client_protocol=options.client_protocol, source=options.source,
                                    target=options.target, replicas=options.replicas)  # fmt: skip
        self.work_dir: Path | None = None
        self.source_server: StoreServer | None = None
        self.target_server: StoreServer | None = None
        self.source_name = STORE_NAMES[options.source]
        self.target_name = STORE_NAMES[options.target]
        self.source: MetadataStore | None = None
        self.agents: list[AgentProcess] = []
        self.clients: list[SimClient] = []
        self.stores: list[MetadataStore] = []
        self.procs: list[processes.AsyncChild] = []
        self._started = time.monotonic()
        self._mark = self._started
        self._copying_since: float | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _lap(self, name: str) -> None:
        now = time.monotonic()
        self.report.phases[name] = now - self._mark
        self._mark = now

    # ---- the run --------------------------------------------------------------------------------

    async def run(self) -> SandboxReport:
        await self.setup()
        frozen = await self._migrate()
        await self._keep_writing()
        await self._stop_clients()
        self._lap("after")
        await self._check(frozen)
        self._lap("check")
        if self.options.beside_copy:
            await self._copy_beside()
        self.report.seconds = time.monotonic() - self._started
        return self.report

    async def setup(self) -> None:
        """Servers, the tree, the agents, and clients writing through them for ``warmup``."""
        r, o = self.report, self.options
        self.work_dir = Path(tempfile.mkdtemp(prefix="metashift-sandbox-"))
        r.work_dir = str(self.work_dir)
        say(f"work directory {self.work_dir}")
        self.source_server = store_server(o.source, self.work_dir / f"source-{o.source}", o.topics, o.replicas)
        self.target_server = store_server(o.target, self.work_dir / f"target-{o.target}", o.topics, o.replicas)
        # in this (the main) thread: the servers die with the thread that started them
        self.source_server.start()
        self.target_server.start()
        say(f"{self.source_name} (source) at {self.source_server.url}, "
            f"{self.target_name} (target) at {self.target_server.url}")
        self._lap("servers")

        self.source = await open_store(self.source_server.url)
        progress = generate_progress(self.source_name)
        tree = await generate(self.source, o.topics, seed=0, ephemerals=False, on_progress=progress)
        r.nodes = tree.persistent
        say(f"generated {tree.persistent} nodes ({tree.bytes / 1e6:.1f} MB) for {o.topics} topics on "
            f"{self.source_name}")
        self._lap("generate")

        self.agents = [self._agent(f"broker-{i}", "broker") for i in range(1, o.brokers + 1)]
        self.agents += [self._agent(f"bookie-{i}", "bookie") for i in range(1, o.bookies + 1)]
        say(f"starting {len(self.agents)} agent processes ...")
        await start_agents(self.agents)
        say("agents serving: " + ", ".join(f"{a.node_id} (pid {a.pid})" for a in self.agents))
        self._lap("agents")

        self.clients = self._make_clients()
        for c in self.clients:
            await c.connect()
            await c.start()
        r.clients = len(self.clients)
        r.ephemerals = sum(len(c.ephemerals) for c in self.clients)
        say(f"{len(self.clients)} clients writing, holding {r.ephemerals} ephemerals")
        await self._more_clients()
        await asyncio.sleep(o.warmup)
        self._lap("warm-up")

    async def _more_clients(self) -> None:
        """Clients of another kind, started with the writers (none here; the chaos run's)."""

    async def _stop_clients(self) -> None:
        for c in self.clients:
            await c.stop()

    def _agent(self, node_id: str, role: str) -> AgentProcess:
        o = self.options
        assert self.work_dir is not None and self.source_server is not None
        return AgentProcess(
            node_id, role, self.work_dir, self.source_server.url, hold_timeout=o.hold_timeout,
            prepare_timeout=o.prepare_timeout, spark_master=o.spark_master,
            zk_listen=f"127.0.0.1:{free_port()}" if o.client_protocol == "zookeeper" else None,
        )  # fmt: skip

    def _zookeeper_front(self, agent: AgentProcess) -> str | None:
        """Where a client reaches ``agent``'s ZooKeeper front (``None``: it serves none)."""
        return agent.zk_listen

    def _make_clients(self) -> list[SimClient]:
        owned = iter(bundles(self.options.topics))
        clients = []
        for agent in self.agents:
            for k in range(1, self.options.clients_per_agent + 1):
                name = f"{agent.node_id}-c{k}"
                ephemerals: dict[str, bytes] = {}
                if k == 1 and agent.role == "broker":
                    ephemerals[f"/loadbalance/brokers/{agent.node_id}:8080"] = json.dumps(
                        {"webServiceUrl": f"http://{agent.node_id}:8080", "brokerVersion": "sandbox"}).encode()
                elif k == 1:
                    ephemerals[f"/ledgers/available/{agent.node_id}:3181"] = b""
                if agent.role == "broker" and (bundle := next(owned, None)) is not None:
                    ephemerals[bundle] = json.dumps({"nativeUrl": f"pulsar://{agent.node_id}:6650"}).encode()
                clients.append(SimClient(name, agent.node_id, agent.role, agent.address, ephemerals,
                                         write_timeout=self.options.hold_timeout,
                                         zookeeper=self._zookeeper_front(agent)))  # fmt: skip
        return clients

    async def _migrate(self, home: MetadataStore | None = None, target_url: str | None = None,
                       *, clean_target: bool = False) -> tuple[float, float] | None:  # fmt: skip
        """Start the migration (from ``home``, the sandbox's source unless given, to
        ``target_url``, its target unless given) and follow it to COMPLETED or FAILED; returns the
        freeze (wall clock, seconds: from PREPARATION, when the agents close their gates, to the
        end), or ``None`` when it never froze."""
        r, o = self.report, self.options
        assert self.source is not None and self.target_server is not None
        source = home or self.source
        target_url = target_url or self.target_server.url
        flag = await control.start(source, target_url, clean_target=clean_target)
        r.epoch = flag.epoch
        say(f"migration epoch {flag.epoch} started: {source.url.public()} -> {target_url}")
        since: dict[str, float] = {Phase.SYNCING.value: flag.started_at / 1000.0}
        last_line = ""
        last_shown = 0.0
        remove = source.add_listener(self._on_flag, under=paths.ROOT) if o.kill_agent_at else None
        silent_since: float | None = None
        while True:
            try:
                status = (await control.status(source)).to_dict()
                now_flag = await read_flag(source)
                silent_since = None
            except StoreUnavailable:
                # the source's server restarting (a chaos run): an Oxia store answers at once that
                # it is down (a ZooKeeper store's read waits for the next connection): look again
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > CHECK_TIMEOUT:
                    raise
                await asyncio.sleep(FOLLOW_SECONDS)
                continue
            phase = status["phase"]
            if now_flag is not None and now_flag.epoch == flag.epoch and now_flag.phase.value not in since:
                since[now_flag.phase.value] = now_flag.phase_since / 1000.0
            if o.kill_agent_at == phase and r.killed_agent is None:
                await self._kill(phase)
            line = progress_line(status)
            ended = phase in (Phase.COMPLETED.value, Phase.FAILED.value)
            fresh = phase != last_line.split(":")[0] or time.monotonic() - last_shown > 2.0
            if not ended and line != last_line and fresh:
                say(line)
                last_line, last_shown = line, time.monotonic()
            if phase in (Phase.COMPLETED.value, Phase.FAILED.value):
                break
            await asyncio.sleep(FOLLOW_SECONDS)
        if remove is not None:
            remove()
        r.phase, r.reason, r.coordinator = phase, status["reason"], status["coordinator"]
        copy = status.get("copy") or {}
        r.coordinator_verified = phase == Phase.COMPLETED.value and bool(copy.get("verified"))
        r.passes = int(copy.get("passes") or 0)
        r.pass_timings = list(copy.get("timings") or [])
        r.copied_nodes = int(copy.get("total") or 0)
        say(f"migration {phase}" + (f": {r.reason}" if r.reason else ""))
        end = since.get(phase, time.time())
        order = [p.value for p in (Phase.SYNCING, Phase.PREPARATION, Phase.COPYING)]
        reached = [p for p in order if p in since]
        for p, nxt in zip(reached, [*reached[1:], None], strict=True):
            r.phases[p] = (since[nxt] if nxt is not None else end) - since[p]
        self._mark = time.monotonic()
        self._copying_since = since.get(Phase.COPYING.value)
        freeze_start = since.get(Phase.PREPARATION.value)
        return (freeze_start, end) if freeze_start is not None else None

    def _on_flag(self, n: Notification) -> None:
        """The flag moved: kill at once when it is the phase asked for (a short PREPARATION may
        fall between two looks at the status)."""
        if n.path == paths.FLAG and self.report.killed_agent is None:
            task = asyncio.get_running_loop().create_task(self._kill_if_due())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _kill_if_due(self) -> None:
        assert self.source is not None
        with contextlib.suppress(MetadataStoreError):
            flag = await read_flag(self.source)
            if flag is not None and flag.phase.value == self.options.kill_agent_at:
                await self._kill(flag.phase.value)

    async def _kill(self, phase: str) -> None:
        """SIGKILL the coordinator's agent, or another (``Options.kill_agent``), once."""
        if self.report.killed_agent is not None:
            return
        self.report.killed_agent = "?"
        assert self.source is not None
        got = await self.source.get(paths.LEADER)
        leader = json.loads(got[0]).get("nodeId") if got is not None else None
        if self.options.kill_agent == "coordinator":
            victim = next((a for a in self.agents if a.node_id == leader), self.agents[0])
        else:
            victim = next((a for a in self.agents if a.node_id != leader), self.agents[-1])
        say(f"SIGKILL to agent {victim.node_id} (pid {victim.pid}, the {self.options.kill_agent}) in {phase}")
        await victim.kill()
        self.report.killed_agent = victim.node_id
        for c in self.clients:
            if c.node_id == victim.node_id:
                c.stopped_early = True
                await c.abandon()

    async def _keep_writing(self) -> None:
        """Writes go on through the switch: ``after`` seconds, and at least a few more acknowledged
        writes per live client (a minute at most)."""
        live = [c for c in self.clients if not c.stopped_early]
        start = {c.name: c.writes_acknowledged for c in live}
        await asyncio.sleep(self.options.after)
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            if all(c.writes_acknowledged >= start[c.name] + MORE_WRITES for c in live):
                return
            await asyncio.sleep(0.1)
        say("some clients got no more writes acknowledged after the migration")

    async def _check(self, frozen: tuple[float, float] | None) -> None:
        r = self.report
        assert self.source is not None
        completed = r.phase == Phase.COMPLETED.value
        lives_on, r.lives_on = self._lives_on()
        # a loaded machine may take more than the default 10 s to answer the checks
        store = await open_store(f"{lives_on}?timeout={CHECK_TIMEOUT:g}", watch=False, create_root=False)
        self.stores.append(store)
        say(f"checking every acknowledged write on {r.lives_on} ...")
        lost = await missing(self.clients, store)
        r.writes_lost, r.lost = len(lost), lost
        r.writes_acknowledged = sum(c.writes_acknowledged for c in self.clients)
        r.writes_failed = sum(c.failed for c in self.clients)
        r.failures = [f"{c.name}: {e}" for c in self.clients for e in c.errors]
        r.failures += [f"{c.name}: stopped: {e}" for c in self.clients if (e := c.error())]
        r.ephemerals_carried, r.ephemerals_missing = await carried(self.clients, store)
        gates = freeze_window([a.log_tail(chars=50_000_000) for a in self.agents])
        if gates is not None:
            # the agents' own record: a short PREPARATION may fall between two status polls
            r.freeze_ms = round((gates[1] - gates[0]) * 1000, 1)
            frozen = gates if frozen is None else (min(gates[0], frozen[0]), max(gates[1], frozen[1]))
            preparation = (self._copying_since or gates[1]) - gates[0]
            r.phases.setdefault(Phase.PREPARATION.value, max(0.0, preparation))
            r.phases.setdefault(Phase.COPYING.value, 0.0)
        held, others = split_timings(self.clients, frozen)
        r.write_hold_ms, r.write_ms = percentiles(held), percentiles(others)
        if frozen is not None and held:
            # from the end of the migration to the last held write's answer
            last = max(t.started + t.seconds for c in self.clients for t in c.timings
                       if frozen[0] <= t.started + t.seconds and t.started <= frozen[1])  # fmt: skip
            r.phases["switch"] = max(0.0, last - frozen[1])
        if completed:
            await self._verify_tree()

    async def _copy_beside(self) -> None:
        """``metashift copy --verify`` of the source into a fresh store of the target's kind, alone
        on the machine."""
        assert self.source_server is not None and self.work_dir is not None
        # their sessions first: a ZooKeeper client (--client-protocol zookeeper) would otherwise
        # keep dialling its stopped agent all through the copy
        await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)
        await stop_agents(self.agents)
        say(f"metashift copy --verify of the same tree into a fresh {self.target_name}, alone, for comparison ...")
        beside = await copy_beside(self.source_server.url, self.work_dir, self.procs,
                                   local_server(self.options.target, self.work_dir / "beside-copy", 0))
        self.report.beside_copy = beside.fields(self.report.phases)
        self._lap("copy --verify")

    def _lives_on(self) -> tuple[str, str]:
        """Where the cluster lives at the end: its store's URL, and how the report names it."""
        assert self.source_server is not None and self.target_server is not None
        if self.report.phase == Phase.COMPLETED.value:
            return self.target_server.url, f"{self.target_name} (target)"
        return self.source_server.url, f"{self.source_name} (source)"

    async def _verify_tree(self) -> None:
        """``metashift verify`` (Spark) of the source against the target, leaving out what the
        clients wrote (it went on in the target after the switch)."""
        r = self.report
        assert self.source_server is not None and self.target_server is not None
        excluded = [WRITER_ROOT, *(c.sequence_parent for c in self.clients)]
        command = ["verify", "--source", self.source_server.url, "--target", self.target_server.url, "--json",
                   "--no-progress"]  # fmt: skip
        for path in excluded:
            command += ["--exclude", path]
        say("verifying the untouched tree: source against target (metashift verify, on Spark) ...")
        try:
            body, _ = await run_cli_json(command, self.procs)
        except RuntimeError as e:
            r.tree_verified = False
            r.tree_check = {"error": str(e)}
            return
        r.tree_verified = bool(body.get("ok"))
        r.tree_check = {
            "nodes": body.get("nodes"), "counters": body.get("counters"), "mismatch_count": body.get("mismatch_count"),
            "excluded": [*excluded[:1], f"{len(excluded) - 1} client counters under /counters"],
            "shown": [f"{m['kind']} {m['path']}: {m['detail']}" for m in (body.get("mismatches") or [])[:10]],
            "seconds": round(float(body.get("seconds") or 0.0), 3),
        }

    # ---- cleanup --------------------------------------------------------------------------------

    async def cleanup(self) -> None:
        """Stop and remove everything this sandbox started; never raises."""
        await asyncio.gather(*(c.abandon() for c in self.clients), return_exceptions=True)
        await stop_agents(self.agents)
        for proc in self.procs:
            with contextlib.suppress(Exception):
                await processes.kill_async(proc)
        for store in [*self.stores, self.source]:
            if store is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(store.close(), 10.0)
        for server in (self.source_server, self.target_server):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.cleanup()
        if self.work_dir is not None:
            if self.options.keep:
                say(f"kept the work directory {self.work_dir}")
            else:
                shutil.rmtree(self.work_dir, ignore_errors=True)
