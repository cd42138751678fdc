# ruff: noqa: E402  (gRPC's environment is set before the imports that load gRPC)
"""Benchmark (not a test): ZooKeeper's client protocol through the agent beside its floors, in one run.

Starts a local ZooKeeper and etcd, two ``metashift agent`` processes serving ZooKeeper's protocol
(``--zk-listen``), one in front of the ZooKeeper and one in front of etcd, and a bare TCP proxy in
front of the ZooKeeper. Rows, each beside its floor:

- ``zookeeper direct``: kazoo against the ZooKeeper (the floor of the next row);
- ``agent -> zookeeper``: kazoo against the agent in front of it;
- ``bare proxy -> zookeeper``: the same through a bare uvloop TCP proxy in its own process
  (``tcp_proxy``: bytes copied, nothing parsed), the least any process in the path costs here.
  Below the table: what it adds to the direct p50 and takes of the direct throughput, and the
  agent's p50 beyond it (the front's own work);
- ``etcd raw (Pulsar txns)``: etcd's KV service called directly, one request per operation in
  Pulsar's ``EtcdMetadataStore`` pattern (get: Range; set: Txn with Put + prev_kv; create: Txn
  ``create_revision == 0`` then Put + prev_kv), from asyncio (the floor of the next row);
- ``agent -> etcd``: kazoo against the agent in front of etcd.

The client is ``metashift_lab.zkraw`` (asyncio, the project's codec: every request written at
once, no thread), or kazoo with ``--client kazoo`` (its thread and queue cap it at a few thousand
calls a second here, whatever the server, so its rows measure kazoo as much as the server).
For getData, setData and create of 1 KB values: throughput with ``--inflight`` calls pipelined on
one session, p50/p99 latency one call at a time, and the agent process's CPU per call (us, every
thread's ``schedstat`` before and after the pipelined runs: the least noisy figure on a shared
machine); the agents' resident memory. The paths take turns (``--rounds`` rounds of ``--ops``
calls each per operation, the order reversed every other round) so that the machine's load weighs
on an agent and its floor alike; throughput is the median of the rounds. ``--repeat N`` runs it
all N times and prints the spread of the ratios. ``--json``: JSON.

    .venv/bin/python bench/zk_front.py [--ops 3000] [--rounds 5] [--inflight 64] [--repeat 3] [--client kazoo]
"""

from __future__ import annotations

import os

from metashift import grpc_env

grpc_env.configure()  # before gRPC loads: this process starts local servers (fork + exec)

# isort: split

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient

if __package__ in (None, ""):  # run as a script: the repository root, so that ``bench`` imports
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import tcp_proxy
from bench.floors import (
    VALUE,
    Call,
    CallPath,
    Path,
    ServerProcess,
    Table,
    add_rounds_argument,
    measure,
    spread,
    start_agent,
)
from bench.raw_etcd import raw_etcd_path
from metashift_lab.servers import LocalEtcd, LocalZooKeeper, free_port
from metashift_lab.zkraw import RawZk

OPS = ["get", "set", "create"]
BARE = "bare proxy -> zookeeper"


def _serial(fn: Callable[[int], Any], ops: int) -> list[float]:
    lat = []
    for i in range(ops):
        t = time.perf_counter()
        fn(i)
        lat.append(time.perf_counter() - t)
    return lat


def _pipelined(start: Callable[[int], Any], ops: int, inflight: int) -> tuple[float, list[float]]:
    """``ops`` calls, ``inflight`` of them pipelined on one session: (ops/s, latencies)."""
    lat: list[float] = []
    t0 = time.perf_counter()
    pending: list[tuple[float, Any]] = []
    for i in range(ops):
        pending.append((time.perf_counter(), start(i)))
        if len(pending) >= inflight:
            began, result = pending.pop(0)
            result.get()
            lat.append(time.perf_counter() - began)
    for began, result in pending:
        result.get()
        lat.append(time.perf_counter() - began)
    return ops / (time.perf_counter() - t0), lat


class KazooPath:
    """A path driven by kazoo (its own thread: the calls block this one, which nothing else needs
    while a path takes its turn)."""

    def __init__(self, name: str, hosts: str, base: str, keys: int, agent: ServerProcess | None) -> None:
        self.name, self.agent, self.base, self.keys = name, agent, base, keys
        self.k = KazooClient(hosts=hosts, timeout=30)
        self.k.start(timeout=30)
        self.k.ensure_path(base)
        self.k.create(f"{base}/node", VALUE)
        for i in range(keys):
            self.k.create_async(f"{base}/r{i}", VALUE)
        self.k.sync(base)
        self.issued = 0

    async def serial(self, op: str, calls: int) -> list[float]:
        k, base, first = self.k, self.base, self.issued
        self.issued += calls
        fn = {
            "get": lambda i: k.get(f"{base}/node"),
            "set": lambda i: k.set(f"{base}/node", VALUE),
            "create": lambda i: k.create(f"{base}/c{first + i}", VALUE),
        }[op]
        return _serial(fn, calls)

    async def concurrent(self, op: str, calls: int, inflight: int) -> tuple[float, list[float]]:
        k, base, keys, first = self.k, self.base, self.keys, self.issued
        self.issued += calls
        fn = {
            "get": lambda i: k.get_async(f"{base}/r{i % keys}"),
            "set": lambda i: k.set_async(f"{base}/r{i % keys}", VALUE),
            "create": lambda i: k.create_async(f"{base}/p{first + i}", VALUE),
        }[op]
        return _pipelined(fn, calls, inflight)

    async def close(self) -> None:
        self.k.stop()
        self.k.close()


async def _pipelined_path(
    name: str, port: int, base: str, keys: int, agent: ServerProcess | None
) -> tuple[CallPath, Any]:
    """A path on the pipelined client (``metashift_lab.zkraw``): its calls in flight on one session."""
    zk = await RawZk.connect("127.0.0.1", port, session_timeout_ms=30_000)
    await zk.create(base, b"")
    await zk.create(f"{base}/node", VALUE)
    await asyncio.gather(*(zk.create(f"{base}/r{i}", VALUE) for i in range(keys)))
    calls: dict[str, tuple[Call, Call]] = {
        "get": (lambda i: zk.get(f"{base}/node"), lambda i: zk.get(f"{base}/r{i % keys}")),
        "set": (lambda i: zk.set(f"{base}/node", VALUE), lambda i: zk.set(f"{base}/r{i % keys}", VALUE)),
        "create": (lambda i: zk.create(f"{base}/c{i}", VALUE), lambda i: zk.create(f"{base}/p{i}", VALUE)),
    }
    return CallPath(name, calls, agent), zk.close


async def _run(
    n: int, zk: LocalZooKeeper, etcd: LocalEtcd, agents: dict[str, ServerProcess], proxy: ServerProcess,
    args: argparse.Namespace,
) -> Table:
    base, keys = f"/bench{n}", 1000
    servers = [
        ("zookeeper direct", zk.port, None, base),
        (BARE, proxy.zk_port, proxy, base + "-proxy"),  # the proxy's clients are at ZooKeeper's root too
        ("agent -> zookeeper", agents["zk"].zk_port, agents["zk"], base),
        ("agent -> etcd", agents["etcd"].zk_port, agents["etcd"], base),
    ]
    paths: dict[str, Path] = {}
    closers: list[Any] = []
    try:
        for name, port, agent, under in servers:
            assert port is not None
            if args.client == "kazoo":
                kazoo = KazooPath(name, f"127.0.0.1:{port}", under, keys, agent)
                paths[name] = kazoo
                closers.append(kazoo.close)
            else:
                paths[name], close = await _pipelined_path(name, port, under, keys, agent)
                closers.append(close)
        paths["etcd raw (Pulsar txns)"], etcd_floor = await raw_etcd_path(etcd.endpoint, base, keys, "set")
        closers.append(etcd_floor.close)
        order = ["zookeeper direct", BARE, "agent -> zookeeper", "etcd raw (Pulsar txns)", "agent -> etcd"]
        table = await measure([paths[name] for name in order], OPS, args.ops, args.inflight, args.rounds)
    finally:
        for close in closers:
            await close()
    table.floors = {"agent -> zookeeper": "zookeeper direct", "agent -> etcd": "etcd raw (Pulsar txns)"}
    table.bare, table.bare_throughput = {"agent -> zookeeper": BARE}, True
    table.rss_mb = {name: agent.rss_mb() for name, agent in agents.items()}
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=3000, help="calls per pipelined run of a path (default 3000)")
    parser.add_argument("--inflight", type=int, default=64)
    add_rounds_argument(parser)
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole table (default 1)")
    parser.add_argument("--client", choices=["pipelined", "kazoo"], default="pipelined",
                        help="the ZooKeeper client of the rows (default: metashift_lab.zkraw, pipelined; kazoo "
                             "tops out at a few thousand calls a second here, whatever the server)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="ms-zkbench-")
    zk, etcd = LocalZooKeeper(), LocalEtcd()
    agents: dict[str, ServerProcess] = {}
    proxy: ServerProcess | None = None
    tables: list[Table] = []
    try:
        zk.start()
        etcd.start()
        agents["zk"] = start_agent(zk.url + "/via-agent", workdir, "agent-zk", zk_port=free_port())
        agents["etcd"] = start_agent(etcd.url + "/via-agent", workdir, "agent-etcd", zk_port=free_port())
        proxy = tcp_proxy.start(free_port(), zk.port)
        for n in range(args.repeat):
            tables.append(asyncio.run(_run(n, zk, etcd, agents, proxy, args)))
            if not args.json:
                print(tables[-1].render(
                    f"run {n + 1}: ZooKeeper protocol ({args.client} client), 1 KB values, {args.rounds} rounds "
                    f"of {args.ops} calls per path, load {os.getloadavg()[0]:.1f}", args.inflight))
                print(flush=True)
    finally:
        for process in (*agents.values(), proxy):
            if process is not None:
                process.stop()
        zk.cleanup()
        etcd.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        runs = [t.as_dict() for t in tables]
        print(json.dumps({"ops": args.ops, "rounds": args.rounds, "inflight": args.inflight, "runs": runs}, indent=2))
    elif len(tables) > 1:
        print(spread(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
