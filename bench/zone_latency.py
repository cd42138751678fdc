# ruff: noqa: E402  (gRPC's environment is set before the imports that load gRPC)
"""A store in another zone: the copy and the freeze of a migration whose target (or source) is
reached through a link adding 20 ms each way, beside the same migration on loopback, in one run
(a benchmark, not a test).

Every server is started here on loopback in a temporary directory and stopped at the end. Each
migration moves one generated tree (``metashift_lab.sample_tree``, ``--topics``) from ZooKeeper to
etcd or Oxia (``--target``) with two agent processes (``broker-1``, the coordinator with its Spark
copy, and ``bookie-1``), a kazoo member registered through each agent's ZooKeeper front and writing
a node every 50 ms meanwhile. Three runs of each round, in turn:

- ``loopback``: the agents reach both stores directly;
- ``node, 0 ms``: the agents run on a node of their own (``metashift_lab.netns.IsolatedNode``: a
  network namespace whose only ways out are proxies on the stores' own addresses), every link
  passing bytes as they come: what the proxies themselves cost;
- ``node, 20 ms``: the same with the far store's links (``--far target`` or ``source``) adding
  ``--delay-ms`` each way (the other store's links still pass).

The node carries every process an agent starts (the Spark driver and its executors), and the
addresses Oxia's shard assignments hand out lead through its proxies too: a proxy in front of one
server would be bypassed after the first call. Figures: the first full pass (the copy, from the
coordinator's progress record), all of SYNCING's passes, the freeze (the agents' logs: the first
"write gate closed" to the last "write gate open"), start -> COMPLETED. Needs root (``ip netns``).

    .venv/bin/python bench/zone_latency.py                           # zk -> etcd, 200 topics
    .venv/bin/python bench/zone_latency.py --target oxia --topics 500 --rounds 2
    .venv/bin/python bench/zone_latency.py --far source --json
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a script: the repository root, so that ``bench`` imports
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from metashift import grpc_env

grpc_env.configure()  # before gRPC loads: this process starts local servers (fork + exec)

# isort: split

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.agent_members import drop_member, migration_ended, registered_member
from metashift.migration.phase import Phase
from metashift.stores import open_store
from metashift_lab.agents import AgentProcess, freeze_window, start_agents, stop_agents
from metashift_lab.cli_runner import run_cli_sync
from metashift_lab.netns import IsolatedNode
from metashift_lab.netproxy import PASS, Link, delay, split_hosts, url_hosts
from metashift_lab.ports import free_port
from metashift_lab.sample_tree import generate
from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper

#: The longest one migration may take before the run gives up on it.
MIGRATION_WITHIN = 1800.0
#: The members registered through the agents' fronts.
REGISTRATIONS = {"broker-1": "/loadbalance/brokers/127.0.0.1:8080", "bookie-1": "/ledgers/available/127.0.0.1:3181"}
#: Seconds between two writes of a member.
WRITE_EVERY = 0.05
RUNS = ("loopback", "node, 0 ms", "node, {ms:g} ms")


def _load() -> float:
    return round(os.getloadavg()[0], 1)


@dataclass
class Setting:
    """One run's way to the stores: direct, or from a node whose far links add ``link``'s delay."""

    name: str
    isolated: bool
    far: Link = PASS


class _Writer:
    """A member writing one node every ``WRITE_EVERY`` seconds through its agent, in a thread."""

    def __init__(self, client: KazooClient, name: str) -> None:
        self.client, self.name = client, name
        self.acked = self.failed = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stopping.wait(WRITE_EVERY) and n < 1_000_000:
            try:
                self.client.create(f"/zone-writes/{self.name}/{n:07d}", b"x", makepath=True)
                self.acked += 1
            except Exception:  # held past a deadline, a connection lost: counted, not retried
                self.failed += 1
            n += 1


async def migrate(setting: Setting, source_url: str, target_url: str, far: str, work: Path,
                  topics: int) -> dict[str, Any]:  # fmt: skip
    """One migration of a fresh tree with two agents and their writing members: its figures."""
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    async with await open_store(source_url) as store:
        nodes = (await generate(store, topics, seed=0, ephemerals=False)).persistent
    node = IsolatedNode.of_urls(source_url, target_url) if setting.isolated else None
    agents: list[AgentProcess] = []
    members: list[KazooClient] = []
    writers: list[_Writer] = []
    try:
        if node is not None:
            node.start()
            node.set(setting.far, only=split_hosts(url_hosts(target_url if far == "target" else source_url)[1]))
        prefix = tuple(node.command([])) if node is not None else ()
        agents = [AgentProcess(node_id, node_id.split("-")[0], work, source_url, hold_timeout=60.0,
                               prepare_timeout=60.0, coordinator_settings={"participant_timeout": 10.0},
                               coordinator_enabled=node_id == "broker-1", zk_listen=f"127.0.0.1:{free_port()}",
                               command_prefix=prefix)
                  for node_id in REGISTRATIONS]  # fmt: skip
        await start_agents(agents)
        for agent in agents:
            assert agent.zk_listen is not None
            port = int(agent.zk_listen.rpartition(":")[2])
            hosts = node.expose(port) if node is not None else agent.zk_listen
            client = await asyncio.to_thread(registered_member, hosts, REGISTRATIONS[agent.node_id])
            members.append(client)
            writers.append(_Writer(client, agent.node_id))
        for writer in writers:
            writer.thread.start()
        print(f"# {setting.name}: {nodes} nodes, migrate start (load {_load()})", file=sys.stderr, flush=True)
        began = time.monotonic()
        started = await asyncio.to_thread(run_cli_sync, "migrate", "start", "--source", source_url, "--target",
                                          target_url, timeout=600)
        if started.returncode != 0:
            raise RuntimeError(f"migrate start ({setting.name}) exited {started.returncode}: {started.stderr[-400:]}")
        phase, _ = await migration_ended(source_url, began, MIGRATION_WITHIN)
        took = time.monotonic() - began
        if phase is not Phase.COMPLETED:
            raise RuntimeError(f"the {setting.name} migration FAILED; agents' logs in {work}")
        status_run = await asyncio.to_thread(run_cli_sync, "migrate", "status", "--source", source_url, "--json",
                                             timeout=600)
        status = json.loads(status_run.stdout) if status_run.returncode == 0 else {}
        timings = (status.get("copy") or {}).get("timings") or []
        full = [t for t in timings if t.get("kind") == "full"]
        window = freeze_window([a.log_tail(chars=50_000_000) for a in agents])
        return {"nodes": nodes, "completed_s": round(took, 2),
                "copy_s": round(float(full[0]["seconds"]), 2) if full else None,
                "syncing_s": round(sum(float(t.get("seconds") or 0) for t in timings), 2),
                "passes": len(timings), "freeze_s": round(window[1] - window[0], 3) if window else None,
                "writes_acked": sum(w.acked for w in writers), "writes_failed": sum(w.failed for w in writers),
                "load": _load()}  # fmt: skip
    finally:
        for writer in writers:
            writer.stopping.set()
        for writer in writers:
            if writer.thread.is_alive():
                await asyncio.to_thread(writer.thread.join, 90)
        for member in members:
            await asyncio.to_thread(drop_member, member)
        await stop_agents(agents)
        if node is not None:
            node.stop()


def _target(kind: str, work: Path) -> Any:
    if kind == "etcd":
        return LocalEtcd(work / "etcd")
    if kind == "zk":
        return LocalZooKeeper(work / "target-zk", heap_mb=256)
    return LocalOxia(work / "oxia")


async def run(target_kind: str, far: str, ms: float, topics: int, rounds: int, work: Path) -> dict[str, Any]:
    settings = [Setting("loopback", False), Setting("node, 0 ms", True), Setting(f"node, {ms:g} ms", True, delay(ms))]
    results: dict[str, list[dict[str, Any]]] = {s.name: [] for s in settings}
    load = {"start": _load()}
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(LocalZooKeeper(work / "source-zk", heap_mb=256))
        target = stack.enter_context(_target(target_kind, work))
        for r in range(rounds):
            for i, setting in enumerate(settings if r % 2 == 0 else list(reversed(settings))):
                root = f"/zone-r{r}-{i}"
                results[setting.name].append(await migrate(
                    setting, f"{source.url}{root}", f"{target.url}{root}", far,
                    work / "agents" / f"r{r}-{i}", topics))  # fmt: skip
    load["end"] = _load()
    summary = {}
    for name, runs in results.items():
        summary[name] = {key: (round(statistics.median(v), 3) if (v := [x[key] for x in runs if x[key] is not None])
                               else None)
                         for key in ("copy_s", "syncing_s", "freeze_s", "completed_s")}  # fmt: skip
        summary[name]["nodes"] = runs[0]["nodes"]
    return {"pair": f"zk -> {target_kind}", "far": far, "delay_ms": ms, "topics": topics, "rounds": rounds,
            "load": load, "summary": summary, "runs": results}


def print_table(report: dict[str, Any]) -> None:
    print(f"migration {report['pair']}, the {report['far']} {report['delay_ms']:g} ms away each way; "
          f"median of {report['rounds']} round(s); load {report['load']['start']} -> {report['load']['end']}")
    print(f"{'run':<16} {'nodes':>7} {'copy s':>8} {'SYNCING s':>10} {'freeze s':>9} {'start->COMPLETED s':>19}")

    def cell(v: float | None, width: int) -> str:
        return f"{v:>{width}.2f}" if v is not None else f"{'-':>{width}}"

    for name, row in report["summary"].items():
        print(f"{name:<16} {row['nodes']:>7} {cell(row['copy_s'], 8)} {cell(row['syncing_s'], 10)} "
              f"{cell(row['freeze_s'], 9)} {cell(row['completed_s'], 19)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("etcd", "zk", "oxia"), default="etcd", help="the target (default etcd)")
    parser.add_argument("--far", choices=("target", "source"), default="target",
                        help="the store in the other zone (default target)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="latency added each way (default 20)")
    parser.add_argument("--topics", type=int, default=200, help="the generated tree's topics (default 200)")
    parser.add_argument("--rounds", type=int, default=1, help="migrations of each run (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (the agents' logs)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.delay_ms <= 0 or args.topics <= 0 or args.rounds <= 0:
        parser.error("--delay-ms, --topics and --rounds must be above 0")
    if os.geteuid() != 0:
        parser.error("needs root: the agents' node is a network namespace (ip netns)")
    work = Path(tempfile.mkdtemp(prefix="metashift-zone-"))
    try:
        report = asyncio.run(run(args.target, args.far, args.delay_ms, args.topics, args.rounds, work))
    finally:
        if args.keep:
            print(f"# kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
