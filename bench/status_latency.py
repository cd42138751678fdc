"""``migrate start --wait`` and ``migrate status`` at tree sizes (a benchmark, not a test).

For each size: a local ZooKeeper (the source) and etcd (the target), a generated tree of about
5.8 nodes per topic on ZooKeeper (``metashift_lab.sample_tree``), a broker's and a bookie's agent
process, then, as an operator runs them (each command its own process):

- ``migrate status --json`` read from the source and from the target before the migration,
  ``--calls`` times each: wall time per call (p50, max), the interpreter's start included;
- ``migrate start --wait`` (ZooKeeper -> etcd): the seconds from its ``COMPLETED`` line (stderr)
  to its exit, and from its summary (stdout) to its exit;
- how long after that the coordinator elected in etcd has walked ZooKeeper once and follows it
  (``writes_after_switch.complete``: what ``status`` then reads is complete);
- ``migrate status --json`` again from the store the cluster left (``writes_after_switch``
  included) and from the one it lives on, ``--calls`` times each;
- and, in this process, the status call alone (``control.status``, ``after_switch`` as the
  command asks it), to tell the call from the interpreter's start (``floor``: ``metashift
  --help`` run the same way).

    .venv/bin/python bench/status_latency.py                       # 100k and 1M nodes
    .venv/bin/python bench/status_latency.py --topics 17000        # 100k nodes
    .venv/bin/python bench/status_latency.py --topics 500 --json   # a tiny run, as JSON

The goal (issue 45): ``--wait`` exits within a second of printing COMPLETED, and ``status`` answers
in well under a second whatever the tree's size, before and after the switch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from metashift.coordinator import control
from metashift.stores import open_store
from metashift_lab.agents import AgentProcess, start_agents, stop_agents
from metashift_lab.cli_runner import run_cli_sync, start_cli
from metashift_lab.sample_tree import generate
from metashift_lab.sandbox.servers import local_server

#: ``--topics`` for about 100k and 1M nodes (about 5.8 nodes per topic).
DEFAULT_TOPICS = (17000, 170000)
#: The longest a migration may take before the run gives up on it.
MIGRATION_WITHIN = 3600.0


def _load() -> float:
    return os.getloadavg()[0]


def _spread(seconds: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(seconds), 3), "max": round(max(seconds), 3), "calls": len(seconds)}


def cli_latency(url: str, calls: int) -> tuple[dict[str, float], dict[str, Any]]:
    """``migrate status --source URL --json`` run ``calls`` times: wall time per call, and the last
    report."""
    seconds, report = [], {}
    for _ in range(calls):
        began = time.monotonic()
        done = run_cli_sync("migrate", "status", "--source", url, "--json", timeout=600)
        seconds.append(time.monotonic() - began)
        if done.returncode != 0:
            raise RuntimeError(f"migrate status --source {url} exited {done.returncode}: {done.stderr.strip()}")
        report = json.loads(done.stdout)
    return _spread(seconds), report


async def call_latency(url: str, calls: int) -> dict[str, float]:
    """``control.status`` in this process (the store opened once), as ``migrate status`` asks it."""
    seconds = []
    async with await open_store(url, create_root=False) as store:
        for _ in range(calls):
            began = time.monotonic()
            await control.status(store, after_switch=True)
            seconds.append(time.monotonic() - began)
    return _spread(seconds)


async def followed(url: str, within: float = MIGRATION_WITHIN) -> float | None:
    """Seconds from here (``--wait``'s exit) until the coordinator where the cluster lives has
    walked the store left once and follows it (``writes_after_switch.complete``)."""
    began = time.monotonic()
    async with await open_store(url, create_root=False) as store:
        while time.monotonic() - began < within:
            written = (await control.status(store, after_switch=True)).after_switch
            if written is not None and not hasattr(written, "followed_by"):
                return None  # a metashift that walked the store at every status: nobody follows it
            if written is not None and written.complete and written.followed_by:
                return round(time.monotonic() - began, 1)
            await asyncio.sleep(0.5)
    return None


def floor(calls: int) -> dict[str, float]:
    """``metashift --help``: the interpreter's start and the CLI's imports, the same way."""
    seconds = []
    for _ in range(calls):
        began = time.monotonic()
        run_cli_sync("--help", timeout=120)
        seconds.append(time.monotonic() - began)
    return _spread(seconds)


def start_and_wait(source: str, target: str) -> dict[str, Any]:
    """``migrate start --wait``: when it printed COMPLETED (stderr) and its summary (stdout), and
    when it exited, in seconds from its start."""
    began = time.monotonic()
    proc = start_cli("migrate", "start", "--source", source, "--target", target, "--wait",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    seen: dict[str, float] = {}
    out: list[str] = []
    err: list[str] = []

    def read(stream: Any, lines: list[str], mark: str) -> None:
        for line in stream:
            lines.append(line)
            if mark == "completed" and line.startswith("COMPLETED"):
                seen.setdefault("completed", time.monotonic() - began)
            if mark == "summary" and line.startswith("phase "):
                seen.setdefault("summary", time.monotonic() - began)

    readers = [threading.Thread(target=read, args=(proc.stdout, out, "summary"), daemon=True),
               threading.Thread(target=read, args=(proc.stderr, err, "completed"), daemon=True)]
    for r in readers:
        r.start()
    try:
        code = proc.wait(MIGRATION_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError(f"migrate start --wait did not end within {MIGRATION_WITHIN:g}s") from None
    exited = time.monotonic() - began
    for r in readers:
        r.join(10)
    if code != 0 or "completed" not in seen:
        raise RuntimeError(f"migrate start --wait exited {code}: {''.join(err[-5:]).strip()}")
    return {
        "exit": code, "migration_s": round(seen["completed"], 1), "exited_s": round(exited, 1),
        "completed_to_exit_s": round(exited - seen["completed"], 2),
        "summary_to_exit_s": round(exited - seen.get("summary", exited), 2),
    }


async def run(topics: int, calls: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="metashift-status-bench-"))
    source_server = local_server("zk", work / "source", topics)
    target_server = local_server("etcd", work / "target", topics)
    agents: list[AgentProcess] = []
    report: dict[str, Any] = {"topics": topics, "load": {"start": round(_load(), 1)}}
    try:
        source_server.start()
        target_server.start()
        source_url, target_url = source_server.url, target_server.url
        async with await open_store(source_url) as store:
            tree = await generate(store, topics, seed=0, ephemerals=False)
        report["nodes"] = tree.persistent
        print(f"# {tree.persistent} nodes on ZooKeeper; agents starting", file=sys.stderr, flush=True)
        agents = [AgentProcess(node_id, role, work, source_url, hold_timeout=60, prepare_timeout=120)
                  for node_id, role in (("broker-1", "broker"), ("bookie-1", "bookie"))]
        await start_agents(agents)
        report["floor"] = floor(calls)
        before: dict[str, Any] = {}
        for name, url in (("source", source_url), ("target", target_url)):
            cli, _ = cli_latency(url, calls)
            before[name] = {"cli": cli, "call": await call_latency(url, calls)}
        report["before"] = before
        report["load"]["migration"] = round(_load(), 1)
        print("# migrate start --wait", file=sys.stderr, flush=True)
        report["wait"] = start_and_wait(source_url, target_url)
        report["followed_s"] = await followed(source_url)
        after: dict[str, Any] = {}
        for name, url in (("source", source_url), ("target", target_url)):
            cli, last = cli_latency(url, calls)
            after[name] = {"cli": cli, "call": await call_latency(url, calls), "phase": last["phase"],
                           "writes_after_switch": last.get("writes_after_switch"), "lives_here": last["lives_here"]}
        report["after"] = after
        report["load"]["end"] = round(_load(), 1)
        return report
    finally:
        await stop_agents(agents)
        for server in (source_server, target_server):
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _pair(spread: dict[str, float]) -> str:
    return f"{spread['p50']:.3f} / {spread['max']:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, nargs="+", default=list(DEFAULT_TOPICS))
    parser.add_argument("--calls", type=int, default=5, help="status calls per store and moment (default 5)")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    args = parser.parse_args()
    runs = [asyncio.run(run(topics, args.calls)) for topics in args.topics]
    if args.json:
        print(json.dumps({"runs": runs}, indent=2))
        return 0
    print("migrate status: p50 / max seconds over the calls; cli = the command in its own process (the "
          "interpreter's start included: floor), call = control.status alone in this process")
    print(f"{'nodes':>8} {'COMPLETED->exit':>15} {'migration':>9}  {'moment':<7} {'store':<22} {'cli':>13} "
          f"{'call':>13}  load")
    for r in runs:
        w = r["wait"]
        lead = f"{r['nodes']:>8} {w['completed_to_exit_s']:>14.2f}s {w['migration_s']:>8.1f}s"
        for moment in ("before", "after"):
            for store, name in (("source", "ZooKeeper (the source)"), ("target", "etcd (the target)")):
                row = r[moment][store]
                print(f"{lead}  {moment:<7} {name:<22} {_pair(row['cli']):>13} {_pair(row['call']):>13}  "
                      f"{r['load']['start']}/{r['load']['migration']}/{r['load']['end']}")
                lead = " " * len(lead)
        print(f"{'':>8} floor (metashift --help): {_pair(r['floor'])}; the store left followed (its one walk "
              f"done) {r.get('followed_s')}s after --wait's exit: {r['after']['source'].get('writes_after_switch')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
