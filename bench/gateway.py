"""Benchmark (not a test): the agent's gRPC gateway beside its floors, in one run.

Starts a local ZooKeeper and etcd (unless URLs are given) and one ``metashift agent`` process per
store (unix socket, client ``metashift.client``). Rows, each beside its floor:

- ``zookeeper direct``: ``metashift.open_store`` on the ZooKeeper, in this process (the floor of
  the next row);
- ``agent -> zookeeper``: the Python client through the agent;
- ``etcd raw (Pulsar txns)``: etcd's KV service called directly, one request per operation in
  Pulsar's ``EtcdMetadataStore`` pattern (get: Range; put: Txn with Put + prev_kv; create: Txn
  ``create_revision == 0`` then Put + prev_kv) (the floor of the next row);
- ``etcd direct (store)``: ``metashift.open_store`` on the etcd (for reference);
- ``agent -> etcd``: the Python client through the agent.

For get, put (blind) and create of 1 KB values: throughput with ``--concurrency`` calls in flight,
p50/p99 one call at a time, the agent process's CPU per call (us, every thread's ``schedstat``
before and after the concurrent run) and its resident memory. ``--repeat N`` runs it all N times
and prints the spread of the ratios. ``--json``: JSON.

    .venv/bin/python bench/gateway.py [--ops 3000] [--concurrency 32] [--repeat 3] [--zk URL] [--etcd URL]
"""

from __future__ import annotations

import os

# set before gRPC loads: local servers are started (fork + exec) by this process
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root, so that ``bench`` imports
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import metashift
import metashift.client
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
from metashift.local_servers import LocalEtcd, LocalZooKeeper

OPS = ["get", "put", "create"]
Call = Callable[[int], Awaitable[Any]]


async def _row(calls: dict[str, tuple[Call, Call]], setup: Callable[[], Awaitable[None]], ops: int,
               concurrency: int, agent: Agent | None) -> dict[str, Figures]:
    """Figures of ``calls`` (op -> (serial call, concurrent call))."""
    await setup()
    row: dict[str, Figures] = {}
    for op in OPS:
        serial, concurrent = calls[op]
        await async_concurrent(concurrent, min(200, ops), 4)  # warm-up (its creates use the first names)
        lone = await async_serial(serial, max(ops // 3, 200))
        before = agent.cpu_ns() if agent else 0
        per_s, lat = await async_concurrent(lambda i: concurrent(i + ops), ops, concurrency)  # noqa: B023
        row[op] = Figures.of(lone, per_s, lat, agent.cpu_ns() - before if agent else None, ops)
    return row


def _store_calls(store: metashift.MetadataStore, base: str, keys: int) -> dict[str, tuple[Call, Call]]:
    return {
        "get": (lambda i: store.get(f"{base}/node"), lambda i: store.get(f"{base}/k{i % keys}")),
        "put": (lambda i: store.put(f"{base}/node", VALUE), lambda i: store.put(f"{base}/k{i % keys}", VALUE)),
        "create": (lambda i: store.put(f"{base}/c{i}", VALUE, -1), lambda i: store.put(f"{base}/p{i}", VALUE, -1)),
    }


async def _store_row(store: metashift.MetadataStore, base: str, ops: int, concurrency: int,
                     agent: Agent | None = None) -> dict[str, Figures]:
    keys = 200

    async def setup() -> None:
        await store.put(f"{base}/node", VALUE)
        await asyncio.gather(*(store.put(f"{base}/k{k}", VALUE) for k in range(keys)))

    return await _row(_store_calls(store, base, keys), setup, ops, concurrency, agent)


async def _raw_etcd_row(endpoint: str, base: str, ops: int, concurrency: int) -> dict[str, Figures]:
    etcd = RawEtcd(endpoint, "/raw-floor")
    keys = 200

    async def setup() -> None:
        await etcd.put(f"{base}/node", VALUE)
        await asyncio.gather(*(etcd.put(f"{base}/k{k}", VALUE) for k in range(keys)))

    calls: dict[str, tuple[Call, Call]] = {
        "get": (lambda i: etcd.get(f"{base}/node"), lambda i: etcd.get(f"{base}/k{i % keys}")),
        "put": (lambda i: etcd.put(f"{base}/node", VALUE), lambda i: etcd.put(f"{base}/k{i % keys}", VALUE)),
        "create": (lambda i: etcd.put(f"{base}/c{i}", VALUE, -1), lambda i: etcd.put(f"{base}/p{i}", VALUE, -1)),
    }
    try:
        return await _row(calls, setup, ops, concurrency, None)
    finally:
        await etcd.close()


async def _through_agent(agent: Agent, base: str, ops: int, concurrency: int) -> dict[str, Figures]:
    client = await metashift.client.connect(f"unix:{agent.socket_path}")
    try:
        return await _store_row(client, base, ops, concurrency, agent)
    finally:
        await client.close()


async def _run(n: int, urls: dict[str, str], etcd_endpoint: str | None, agents: dict[str, Agent], ops: int,
               concurrency: int) -> Table:
    base = f"/bench{n}"
    table = Table(OPS)
    if "zk" in urls:
        table.floors["agent -> zookeeper"] = "zookeeper direct"
        direct = await metashift.open_store(urls["zk"])
        try:
            table.rows["zookeeper direct"] = await _store_row(direct, base + "-direct", ops, concurrency)
        finally:
            await direct.close()
        table.rows["agent -> zookeeper"] = await _through_agent(agents["zk"], base + "-agent", ops, concurrency)
    if "etcd" in urls:
        if etcd_endpoint is not None:
            table.floors["agent -> etcd"] = "etcd raw (Pulsar txns)"
            table.rows["etcd raw (Pulsar txns)"] = await _raw_etcd_row(etcd_endpoint, base, ops, concurrency)
        direct = await metashift.open_store(urls["etcd"])
        try:
            table.rows["etcd direct (store)"] = await _store_row(direct, base + "-direct", ops, concurrency)
        finally:
            await direct.close()
        table.rows["agent -> etcd"] = await _through_agent(agents["etcd"], base + "-agent", ops, concurrency)
    table.rss_mb = {name: agent.rss_mb() for name, agent in agents.items()}
    return table


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=3000, help="calls per concurrent run (default 3000)")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight for the concurrent run")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole table (default 1)")
    parser.add_argument("--zk", help="ZooKeeper URL (default: start a local one)")
    parser.add_argument("--etcd", help="etcd URL (default: start a local one; the raw floor needs a local one)")
    parser.add_argument("--only", choices=["zk", "etcd"], help="bench one store only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    servers: list[LocalZooKeeper | LocalEtcd] = []
    urls: dict[str, str] = {}
    etcd_endpoint: str | None = None
    agents: dict[str, Agent] = {}
    workdir = tempfile.mkdtemp(prefix="ms-gwbench-")
    tables: list[Table] = []
    try:
        for kind, given, cls in (("zk", args.zk, LocalZooKeeper), ("etcd", args.etcd, LocalEtcd)):
            if args.only and args.only != kind:
                continue
            if given:
                urls[kind] = given
                continue
            server = cls()
            server.start()
            servers.append(server)
            urls[kind] = server.url + "/bench"
            if isinstance(server, LocalEtcd):
                etcd_endpoint = server.endpoint
        for kind, url in urls.items():
            agents[kind] = start_agent(url, workdir, f"agent-{kind}")
        for n in range(args.repeat):
            tables.append(await _run(n, urls, etcd_endpoint, agents, args.ops, args.concurrency))
            if not args.json:
                print(tables[-1].render(
                    f"run {n + 1}: gRPC gateway (metashift.client), 1 KB values, {args.ops} calls per concurrent "
                    f"run, load {os.getloadavg()[0]:.1f}", args.concurrency))
                print(flush=True)
    finally:
        for agent in agents.values():
            agent.stop()
        for server in servers:
            server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps({"ops": args.ops, "concurrency": args.concurrency, "runs": [t.as_dict() for t in tables]},
                         indent=2))
    elif len(tables) > 1:
        print(spread(tables))
    return 0


if __name__ == "__main__":
    from metashift.stores.aio import run_loop

    sys.exit(run_loop(main()))
