"""Benchmark (not a test): the agent's gateway against direct store access, in the same run.

For each store (a local ZooKeeper and etcd unless URLs are given), get and put of 1 KB values,
directly (``metashift.open_store``) and through an agent (``metashift agent`` in its own process,
unix socket, client ``metashift.client``): ops/s and p50/p99 latency with 1 call in flight and with
``--concurrency`` calls in flight; and the agent's resident memory (idle, and after the load).
Prints JSON.

    .venv/bin/python bench/gateway.py [--ops 3000] [--concurrency 32] [--zk URL] [--etcd URL]
"""

from __future__ import annotations

import os

# set before gRPC loads: local servers are started (fork + exec) by this process
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import metashift
import metashift.client
from metashift.local_servers import LocalEtcd, LocalZooKeeper

VALUE = b"v" * 1024


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _measure(op: Callable[[int], Awaitable[Any]], ops: int, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    counter = iter(range(ops))

    async def worker() -> None:
        for i in counter:
            t = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "ops_per_s": round(ops / elapsed),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 3),
    }


async def _suite(store: metashift.MetadataStore, prefix: str, ops: int, concurrency: int) -> dict[str, Any]:
    keys = 200
    for k in range(keys):
        await store.put(f"{prefix}/k{k}", VALUE)

    async def get(i: int) -> None:
        await store.get(f"{prefix}/k{i % keys}")

    async def put(i: int) -> None:
        await store.put(f"{prefix}/k{i % keys}", VALUE)

    out: dict[str, Any] = {}
    for name, op in (("get", get), ("put", put)):
        await _measure(op, min(300, ops), 4)  # warm-up
        out[name] = {
            "serial": await _measure(op, ops // 2, 1),
            f"concurrent_{concurrency}": await _measure(op, ops, concurrency),
        }
    return out


async def _bench_store(kind: str, url: str, ops: int, concurrency: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    direct = await metashift.open_store(url)
    try:
        result["direct"] = await _suite(direct, "/bench-direct", ops, concurrency)
    finally:
        await direct.close()

    directory = tempfile.mkdtemp(prefix="ms-bench-")
    sock = f"{directory}/agent.sock"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "metashift.cli", "agent", "--source", url, "--listen", f"unix:{sock}",
        "--node-id", f"bench-{kind}", "--log-level", "warning",
    )
    try:
        for _ in range(600):
            if _exists(sock):
                break
            await asyncio.sleep(0.05)
        client = await metashift.client.connect(f"unix:{sock}")
        try:
            idle_kb = _rss_kb(proc.pid)
            result["gateway"] = await _suite(client, "/bench-gateway", ops, concurrency)
            after_kb = _rss_kb(proc.pid)
            result["agent_rss_mb"] = {"idle": round(idle_kb / 1024, 1), "after_load": round(after_kb / 1024, 1)}
        finally:
            await client.close()
    finally:
        proc.terminate()
        await proc.wait()
    return result


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gateway vs direct store access")
    parser.add_argument("--ops", type=int, default=3000, help="calls per measurement (default 3000)")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight for the concurrent run")
    parser.add_argument("--zk", help="ZooKeeper URL (default: start a local one)")
    parser.add_argument("--etcd", help="etcd URL (default: start a local one)")
    parser.add_argument("--only", choices=["zk", "etcd"], help="bench one store only")
    args = parser.parse_args(argv)
    servers: list[LocalZooKeeper | LocalEtcd] = []
    urls: dict[str, str] = {}
    try:
        for kind, given, cls in (("zk", args.zk, LocalZooKeeper), ("etcd", args.etcd, LocalEtcd)):
            if args.only and args.only != kind:
                continue
            if given:
                urls[kind] = given
            else:
                server = cls()
                server.start()
                servers.append(server)
                urls[kind] = server.url + f"/bench-{int(time.time())}"
        report: dict[str, Any] = {
            "value_bytes": len(VALUE), "ops": args.ops, "cpus": os.cpu_count(),
            "note": "direct and gateway measured in the same run; the client runs in this process, "
                    "the agent in its own; serial = 1 call in flight",
        }
        for kind, url in urls.items():
            report[kind] = await _bench_store(kind, url, args.ops, args.concurrency)
        print(json.dumps(report, indent=2))
    finally:
        for server in servers:
            server.cleanup()
    return 0


if __name__ == "__main__":
    from metashift.stores.aio import run_loop

    sys.exit(run_loop(main()))
