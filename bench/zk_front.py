"""Benchmark (not a test): ZooKeeper's client protocol through the agent beside its floors, in one run.

Starts a local ZooKeeper and etcd and two ``metashift agent`` processes serving ZooKeeper's protocol
(``--zk-listen``): one in front of the ZooKeeper, one in front of etcd. Rows, each beside its floor:

- ``zookeeper direct``: kazoo against the ZooKeeper (the floor of the next row);
- ``agent -> zookeeper``: kazoo against the agent in front of it;
- ``etcd raw (Pulsar txns)``: etcd's KV service called directly, one request per operation in
  Pulsar's ``EtcdMetadataStore`` pattern (get: Range; set: Txn with Put + prev_kv; create: Txn
  ``create_revision == 0`` then Put + prev_kv), from asyncio (the floor of the next row);
- ``agent -> etcd``: kazoo against the agent in front of etcd.

The client is ``bench/zk_pipelined.py`` (asyncio, the project's codec: every request written at
once, no thread), or kazoo with ``--client kazoo`` (its thread and queue cap it at a few thousand
calls a second here, whatever the server, so its rows measure kazoo as much as the server).
For getData, setData and create of 1 KB values: throughput with ``--inflight`` calls pipelined on
one session, p50/p99 latency one call at a time, and the agent process's CPU per call (us, every
thread's ``schedstat`` before and after the pipelined run: the least noisy figure on a shared
machine); the agents' resident memory. ``--repeat N`` runs it all N times and prints the spread
of the ratios. ``--json``: JSON.

    .venv/bin/python bench/zk_front.py [--ops 3000] [--inflight 64] [--repeat 3] [--client kazoo]
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

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

from bench.floors import (
    VALUE,
    Agent,
    Figures,
    RawEtcd,
    Table,
    async_concurrent,
    async_serial,
    spread,
    start_agent,
)
from bench.zk_pipelined import PipelinedZk
from metashift.local_servers import LocalEtcd, LocalZooKeeper, free_port

OPS = ["get", "set", "create"]


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


def _kazoo_row(hosts: str, base: str, ops: int, inflight: int, agent: Agent | None) -> dict[str, Figures]:
    k = KazooClient(hosts=hosts, timeout=30)
    k.start(timeout=30)
    try:
        k.ensure_path(base)
        k.create(f"{base}/node", VALUE)
        for i in range(ops):
            k.create_async(f"{base}/r{i}", VALUE)
        k.sync(base)
        serial = {
            "get": lambda i: k.get(f"{base}/node"),
            "set": lambda i: k.set(f"{base}/node", VALUE),
            "create": lambda i: k.create(f"{base}/c{i}", VALUE),
        }
        pipelined = {
            "get": lambda i: k.get_async(f"{base}/r{i}"),
            "set": lambda i: k.set_async(f"{base}/r{i}", VALUE),
            "create": lambda i: k.create_async(f"{base}/p{i}", VALUE),
        }
        row: dict[str, Figures] = {}
        for op in OPS:
            lone = _serial(serial[op], max(ops // 3, 200))
            before = agent.cpu_ns() if agent else 0
            per_s, lat = _pipelined(pipelined[op], ops, inflight)
            row[op] = Figures.of(lone, per_s, lat, agent.cpu_ns() - before if agent else None, ops)
        return row
    finally:
        k.stop()
        k.close()


async def _etcd_row(endpoint: str, base: str, ops: int, inflight: int) -> dict[str, Figures]:
    etcd = RawEtcd(endpoint, "/raw-floor")
    try:
        await etcd.put(f"{base}/node", VALUE)
        await asyncio.gather(*(etcd.put(f"{base}/r{i}", VALUE) for i in range(ops)))
        serial = {
            "get": lambda i: etcd.get(f"{base}/node"),
            "set": lambda i: etcd.put(f"{base}/node", VALUE),
            "create": lambda i: etcd.put(f"{base}/c{i}", VALUE, -1),
        }
        concurrent = {
            "get": lambda i: etcd.get(f"{base}/r{i}"),
            "set": lambda i: etcd.put(f"{base}/r{i}", VALUE),
            "create": lambda i: etcd.put(f"{base}/p{i}", VALUE, -1),
        }
        row: dict[str, Figures] = {}
        for op in OPS:
            lone = await async_serial(serial[op], max(ops // 3, 200))
            per_s, lat = await async_concurrent(concurrent[op], ops, inflight)
            row[op] = Figures.of(lone, per_s, lat, None, ops)
        return row
    finally:
        await etcd.close()


async def _pipelined_row(port: int, base: str, ops: int, inflight: int, agent: Agent | None) -> dict[str, Figures]:
    """The row of one server with the pipelined client (``zk_pipelined``): ``inflight`` calls in
    flight on one session, as many as kazoo's run sends."""
    zk = await PipelinedZk.connect("127.0.0.1", port)
    try:
        await zk.create(base, b"")
        await zk.create(f"{base}/node", VALUE)
        await asyncio.gather(*(zk.create(f"{base}/r{i}", VALUE) for i in range(ops)))
        serial = {"get": lambda i: zk.get(f"{base}/node"), "set": lambda i: zk.set(f"{base}/node", VALUE),
                  "create": lambda i: zk.create(f"{base}/c{i}", VALUE)}
        pipelined = {"get": lambda i: zk.get(f"{base}/r{i}"), "set": lambda i: zk.set(f"{base}/r{i}", VALUE),
                     "create": lambda i: zk.create(f"{base}/p{i}", VALUE)}
        row: dict[str, Figures] = {}
        for op in OPS:
            lone = await async_serial(serial[op], max(ops // 3, 200))
            before = agent.cpu_ns() if agent else 0
            per_s, lat = await async_concurrent(pipelined[op], ops, inflight)
            row[op] = Figures.of(lone, per_s, lat, agent.cpu_ns() - before if agent else None, ops)
        return row
    finally:
        await zk.close()


def _run(n: int, zk: LocalZooKeeper, etcd: LocalEtcd, agents: dict[str, Agent], ops: int, inflight: int,
         client: str) -> Table:
    base = f"/bench{n}"
    table = Table(OPS, floors={"agent -> zookeeper": "zookeeper direct", "agent -> etcd": "etcd raw (Pulsar txns)"})

    def row(port: int | None, agent: Agent | None) -> dict[str, Figures]:
        assert port is not None
        if client == "kazoo":
            return _kazoo_row(f"127.0.0.1:{port}", base, ops, inflight, agent)
        return asyncio.run(_pipelined_row(port, base, ops, inflight, agent))

    table.rows["zookeeper direct"] = row(zk.port, None)
    a = agents["zk"]
    table.rows["agent -> zookeeper"] = row(a.zk_port, a)
    table.rows["etcd raw (Pulsar txns)"] = asyncio.run(_etcd_row(etcd.endpoint, base, ops, inflight))
    a = agents["etcd"]
    table.rows["agent -> etcd"] = row(a.zk_port, a)
    table.rss_mb = {name: agent.rss_mb() for name, agent in agents.items()}
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=3000, help="calls per pipelined run (default 3000)")
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole table (default 1)")
    parser.add_argument("--client", choices=["pipelined", "kazoo"], default="pipelined",
                        help="the ZooKeeper client of the rows (default: bench/zk_pipelined.py; kazoo tops out "
                             "at a few thousand calls a second here, whatever the server)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="ms-zkbench-")
    zk, etcd = LocalZooKeeper(), LocalEtcd()
    agents: dict[str, Agent] = {}
    tables: list[Table] = []
    try:
        zk.start()
        etcd.start()
        agents["zk"] = start_agent(zk.url + "/via-agent", workdir, "agent-zk", zk_port=free_port())
        agents["etcd"] = start_agent(etcd.url + "/via-agent", workdir, "agent-etcd", zk_port=free_port())
        for n in range(args.repeat):
            tables.append(_run(n, zk, etcd, agents, args.ops, args.inflight, args.client))
            if not args.json:
                print(tables[-1].render(
                    f"run {n + 1}: ZooKeeper protocol ({args.client} client), 1 KB values, {args.ops} calls "
                    f"per pipelined run, load {os.getloadavg()[0]:.1f}", args.inflight))
                print(flush=True)
    finally:
        for agent in agents.values():
            agent.stop()
        zk.cleanup()
        etcd.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps({"ops": args.ops, "inflight": args.inflight, "runs": [t.as_dict() for t in tables]}, indent=2))
    elif len(tables) > 1:
        print(spread(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
