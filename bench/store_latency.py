"""Per-operation latency of the store layer on each backend (a benchmark, not a test).

Starts a local ZooKeeper and etcd, then for each backend runs every operation one at a time (so
the figure is a round trip, not a pipelined rate) and prints p50/p99/mean in microseconds as JSON.

    .venv/bin/python bench/store_latency.py [--ops 2000] [--value-size 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable

import metashift
from metashift_lab.servers import LocalEtcd, LocalZooKeeper


async def _measure(n: int, op: Callable[[int], Awaitable[object]]) -> dict[str, float]:
    samples = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        await op(i)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return {
        "p50_us": round(samples[len(samples) // 2], 1),
        "p99_us": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 1),
        "mean_us": round(statistics.fmean(samples), 1),
        "ops_per_s": round(n / (sum(samples) / 1e6), 1),
    }


async def bench_backend(url: str, n: int, value: bytes) -> dict[str, dict[str, float]]:
    store = await metashift.open_store(url)
    try:
        await store.put("/bench", b"")
        await store.put("/bench/seq", b"")
        await store.put("/bench/eph", b"")
        results = {
            "create": await _measure(n, lambda i: store.put(f"/bench/n{i}", value, expected_version=-1)),
            "put_cas": await _measure(n, lambda i: store.put(f"/bench/n{i}", value, expected_version=0)),
            "put_blind": await _measure(n, lambda i: store.put(f"/bench/n{i}", value)),
            "get": await _measure(n, lambda i: store.get(f"/bench/n{i}")),
            "exists": await _measure(n, lambda i: store.exists(f"/bench/n{i}")),
            "get_children_small": await _measure(n, lambda i: store.get_children("/bench/seq")),
            "put_sequential": await _measure(n, lambda i: store.put("/bench/seq/id-", b"", sequential=True)),
            "put_ephemeral": await _measure(n, lambda i: store.put(f"/bench/eph/e{i}", value, ephemeral=True)),
            "delete": await _measure(n, lambda i: store.delete(f"/bench/n{i}")),
        }
    finally:
        await store.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="operations of each kind (default 2000)")
    parser.add_argument("--value-size", type=int, default=1024, help="bytes per value (default 1024)")
    args = parser.parse_args()
    value = os.urandom(args.value_size)
    with LocalZooKeeper() as zk, LocalEtcd() as etcd:
        out = {
            "ops_each": args.ops,
            "value_bytes": args.value_size,
            "zookeeper": await bench_backend(zk.url, args.ops, value),
            "etcd": await bench_backend(etcd.url, args.ops, value),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    from metashift.stores.aio import run_loop

    run_loop(main())
