# ruff: noqa: E402  (gRPC's environment is set before the imports that load gRPC)
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
- ``agent -> etcd``: the Python client through the agent;
- ``gRPC hop (echo)``: a bare gRPC call to an echo server in another process (``grpc_hop``), with
  the gateway's sizes: the floor under any gateway on grpcio in Python. Below the table, each
  agent row's p50 beyond its floor and this hop: the gateway's own added latency.
- ``bare gateway -> zookeeper`` and ``-> etcd``: the same echo server making one call of the store
  per message (``grpc_hop --store``), the barest gateway there is. Below the table, what it adds
  to the store's direct p50 (``zookeeper direct``, ``etcd direct (store)``: it reaches the store
  through the store layer, as the agent does), the least a grpc.aio gateway can add on this
  machine, and what the agent adds beyond it (the agent's own work). Its throughput is not a
  floor (it answers in order).

For get, put (blind) and create of 1 KB values: throughput with ``--concurrency`` calls in flight,
p50/p99 one call at a time, the agent process's CPU per call (us, every thread's ``schedstat``
before and after the concurrent runs) and its resident memory. The paths take turns (``--rounds``
rounds of ``--ops`` calls each per operation, the order reversed every other round) so that the
machine's load weighs on an agent and its floor alike; throughput is the median of the rounds.
``--repeat N`` runs it all N times and prints the spread of the ratios. ``--json``: JSON.

    .venv/bin/python bench/gateway.py [--ops 3000] [--rounds 5] [--concurrency 32] [--repeat 3] [--zk URL] [--etcd URL]
"""

from __future__ import annotations

import os

from metashift import grpc_env

grpc_env.configure()  # before gRPC loads: this process starts local servers (fork + exec)

# isort: split

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: the repository root, so that ``bench`` imports
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import metashift
import metashift.client
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
from bench.grpc_hop import Hop
from bench.raw_etcd import raw_etcd_path
from metashift_lab.servers import LocalEtcd, LocalZooKeeper

OPS = ["get", "put", "create"]
HOP = "gRPC hop (echo)"
BARE = {"zk": "bare gateway -> zookeeper", "etcd": "bare gateway -> etcd"}
#: Keys the concurrent gets and puts go round.
KEYS = 200


def _store_calls(store: metashift.MetadataStore, base: str, keys: int) -> dict[str, tuple[Call, Call]]:
    return {
        "get": (lambda i: store.get(f"{base}/node"), lambda i: store.get(f"{base}/k{i % keys}")),
        "put": (lambda i: store.put(f"{base}/node", VALUE), lambda i: store.put(f"{base}/k{i % keys}", VALUE)),
        "create": (lambda i: store.put(f"{base}/c{i}", VALUE, -1), lambda i: store.put(f"{base}/p{i}", VALUE, -1)),
    }


async def _write_tree(store: metashift.MetadataStore, base: str) -> None:
    """What the gets and puts of a path under ``base`` read and write."""
    await store.put(f"{base}/node", VALUE)
    await asyncio.gather(*(store.put(f"{base}/k{k}", VALUE) for k in range(KEYS)))


async def _store_path(
    name: str, store: metashift.MetadataStore, base: str, agent: ServerProcess | None = None
) -> CallPath:
    await _write_tree(store, base)
    return CallPath(name, _store_calls(store, base, KEYS), agent)


async def _run(
    n: int, urls: dict[str, str], etcd_endpoint: str | None, agents: dict[str, ServerProcess], hop: Hop,
    bare: dict[str, Hop], args: argparse.Namespace,
) -> Table:
    base = f"/bench{n}"
    paths: list[Path] = [hop.path(HOP)]
    floors: dict[str, str] = {}
    bare_rows: dict[str, str] = {}
    bare_floors: dict[str, str] = {}
    async with contextlib.AsyncExitStack() as stack:

        async def store(url: str) -> metashift.MetadataStore:
            opened = await metashift.open_store(url)
            stack.push_async_callback(opened.close)
            return opened

        async def client(agent: ServerProcess) -> metashift.MetadataStore:
            opened = await metashift.client.connect(f"unix:{agent.socket_path}")
            stack.push_async_callback(opened.close)
            return opened

        async def add_bare_path(kind: str, direct: metashift.MetadataStore, agent_row: str, floor: str) -> None:
            """The bare gateway to the store ``direct`` opens, beside ``agent_row``; ``floor``: its row."""
            await _write_tree(direct, base + "-bare")
            bare_rows[agent_row], bare_floors[BARE[kind]] = BARE[kind], floor
            paths.append(bare[kind].store_path(BARE[kind], base + "-bare", KEYS))

        if "zk" in urls:
            floors["agent -> zookeeper"] = "zookeeper direct"
            direct = await store(urls["zk"])
            paths.append(await _store_path("zookeeper direct", direct, base + "-direct"))
            await add_bare_path("zk", direct, "agent -> zookeeper", "zookeeper direct")
            paths.append(await _store_path("agent -> zookeeper", await client(agents["zk"]), base + "-agent",
                                           agents["zk"]))  # fmt: skip
        if "etcd" in urls:
            if etcd_endpoint is not None:
                floors["agent -> etcd"] = "etcd raw (Pulsar txns)"
                raw, etcd = await raw_etcd_path(etcd_endpoint, base, KEYS, "put")
                stack.push_async_callback(etcd.close)
                paths.append(raw)
            direct = await store(urls["etcd"])
            paths.append(await _store_path("etcd direct (store)", direct, base + "-direct"))
            await add_bare_path("etcd", direct, "agent -> etcd", "etcd direct (store)")
            paths.append(await _store_path("agent -> etcd", await client(agents["etcd"]), base + "-agent",
                                           agents["etcd"]))  # fmt: skip
        table = await measure(paths, OPS, args.ops, args.concurrency, args.rounds)
    table.floors = floors
    table.hop = HOP
    table.bare, table.bare_floors = bare_rows, bare_floors
    table.rss_mb = {name: agent.rss_mb() for name, agent in agents.items()}
    return table


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=3000, help="calls per concurrent run of a path (default 3000)")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight for the concurrent run")
    add_rounds_argument(parser)
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole table (default 1)")
    parser.add_argument("--zk", help="ZooKeeper URL (default: start a local one)")
    parser.add_argument("--etcd", help="etcd URL (default: start a local one; the raw floor needs a local one)")
    parser.add_argument("--only", choices=["zk", "etcd"], help="bench one store only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    servers: list[LocalZooKeeper | LocalEtcd] = []
    urls: dict[str, str] = {}
    etcd_endpoint: str | None = None
    agents: dict[str, ServerProcess] = {}
    workdir = tempfile.mkdtemp(prefix="ms-gwbench-")
    tables: list[Table] = []
    hop: Hop | None = None
    bare: dict[str, Hop] = {}
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
        hop = Hop(os.path.join(workdir, "echo.sock"))
        for kind, url in urls.items():
            bare[kind] = Hop(os.path.join(workdir, f"bare-{kind}.sock"), url)
        for n in range(args.repeat):
            tables.append(await _run(n, urls, etcd_endpoint, agents, hop, bare, args))
            if not args.json:
                print(tables[-1].render(
                    f"run {n + 1}: gRPC gateway (metashift.client), 1 KB values, {args.rounds} rounds of "
                    f"{args.ops} calls per path, load {os.getloadavg()[0]:.1f}", args.concurrency))
                print(flush=True)
    finally:
        for closing in (hop, *bare.values()):  # each, whatever the others did
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing.close()
        for agent in agents.values():
            with contextlib.suppress(Exception):
                agent.stop()
        for server in servers:
            with contextlib.suppress(Exception):
                server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        runs = [t.as_dict() for t in tables]
        print(json.dumps({"ops": args.ops, "rounds": args.rounds, "concurrency": args.concurrency, "runs": runs},
                         indent=2))
    elif len(tables) > 1:
        print(spread(tables))
    return 0


if __name__ == "__main__":
    from metashift.stores.aio import run_loop

    sys.exit(run_loop(main()))
