"""Copy and verification rates, side by side with this machine's raw limits and a naive baseline
(a benchmark, not a test).

In one run, on one generated tree (``metashift.sample_tree``) on a local ZooKeeper:

- ``raw_zk_reads``: pipelined reads of every node from ZooKeeper (the store layer's batch);
- ``raw_etcd_writes``: every node's value written once to etcd in txns of 128 puts, several in
  flight (the store layer's batch), keys per second;
- ``copy``: ``metashift copy`` ZooKeeper -> etcd on Spark ``local[*]`` (versions kept, so a node of
  version V costs V+1 etcd writes: see ``write_ops_per_second`` next to the raw write rate);
- ``verify``: ``metashift verify`` of the result;
- ``kazoo_baseline``: a plain sequential kazoo copy ZooKeeper -> ZooKeeper of the same tree
  (get, create, then set_data until the version matches), run for at most ``--baseline-seconds``
  and reported as a rate;
- peak resident memory of the copy job (driver, its JVM and Python workers; servers excluded).

    metashift bench copy --topics 17000       # ~100k nodes
    metashift bench copy --topics 170000      # ~1M nodes

The kazoo baseline needs kazoo, which metashift itself does not: ``pip install 'metashift[bench]'``
(the test extras have it too).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from metashift.local_servers import LocalEtcd, LocalZooKeeper
from metashift.sample_tree import generate
from metashift.stores import GetOp, PutOp, Store, open_store


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


class PeakMemory:
    """Samples the summed RSS of this process and its descendants, minus excluded subtrees."""

    def __init__(self, exclude: list[int]) -> None:
        self.exclude = set(exclude)
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            tree = _children()
            total, todo = 0, [os.getpid()]
            while todo:
                pid = todo.pop()
                if pid in self.exclude:
                    continue
                total += _rss_kb(pid)
                todo.extend(tree.get(pid, []))
            self.peak_kb = max(self.peak_kb, total)
            self._stop.wait(0.5)

    def __enter__(self) -> PeakMemory:
        self.peak_kb = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def _all_paths(store: Store) -> tuple[list[str], int]:
    """Persistent paths, and the writes a version-keeping copy of them takes (sum of V+1)."""
    out: list[str] = []
    writes = 0
    async for page in store.walk(prune=("/zookeeper",)):
        for n in page:
            if not n.ephemeral:
                out.append(n.path)
                writes += n.version + 1
    return out, writes


async def raw_zk_reads(url: str, all_paths: list[str]) -> dict[str, Any]:
    store = await open_store(url, watch=False)
    try:
        started = time.monotonic()
        nbytes = 0
        sem = asyncio.Semaphore(4)

        async def read(chunk: list[str]) -> None:
            nonlocal nbytes
            async with sem:
                for r in await store.batch([GetOp(p) for p in chunk]):
                    if isinstance(r, tuple):
                        nbytes += len(r[0])

        await asyncio.gather(*(read(all_paths[i : i + 1000]) for i in range(0, len(all_paths), 1000)))
        seconds = time.monotonic() - started
    finally:
        await store.close()
    return {"nodes": len(all_paths), "bytes": nbytes, "seconds": round(seconds, 2),
            "nodes_per_second": round(len(all_paths) / seconds)}  # fmt: skip


async def raw_etcd_writes(zk_url: str, etcd_url: str, all_paths: list[str]) -> dict[str, Any]:
    source = await open_store(zk_url, watch=False)
    target = await open_store(etcd_url + "/raw-writes", watch=False)
    try:
        values: list[tuple[str, bytes]] = []
        for i in range(0, len(all_paths), 2000):
            chunk = all_paths[i : i + 2000]
            for p, r in zip(chunk, await source.batch([GetOp(p) for p in chunk]), strict=True):
                if isinstance(r, tuple):
                    values.append((p, r[0]))
        started = time.monotonic()
        sem = asyncio.Semaphore(2)

        async def write(chunk: list[tuple[str, bytes]]) -> None:
            async with sem:
                for r in await target.batch([PutOp(p, v) for p, v in chunk]):
                    if isinstance(r, Exception):
                        raise r

        await asyncio.gather(*(write(values[i : i + 1024]) for i in range(0, len(values), 1024)))
        seconds = time.monotonic() - started
        await target.compact_history()
    finally:
        await source.close()
        await target.close()
    return {"keys": len(values), "seconds": round(seconds, 2), "keys_per_second": round(len(values) / seconds)}


def kazoo_baseline(zk_hosts: str, all_paths: list[str], total_writes: int, budget: float) -> dict[str, Any]:
    """A naive copy: one call at a time, parents first, versions kept with set_data. When the
    budget runs out first, the time of the whole copy is estimated from its calls per second
    (reads + writes), since the first nodes (shallow ones) are cheaper than the average."""
    from kazoo.client import KazooClient

    src = KazooClient(hosts=zk_hosts)
    dst = KazooClient(hosts=zk_hosts + "/kazoo-copy")
    src.start()
    src.ensure_path("/kazoo-copy")
    dst.start()
    started = time.monotonic()
    nodes = writes = 0
    try:
        for path in sorted(all_paths, key=lambda p: (p.count("/"), p)):
            if time.monotonic() - started > budget:
                break
            data, stat = src.get(path)
            dst.create(path, data if stat.version == 0 else b"", makepath=True)
            writes += 1
            for v in range(stat.version):
                dst.set(path, data if v + 1 == stat.version else b"", version=v)
                writes += 1
            nodes += 1
    finally:
        seconds = time.monotonic() - started
        src.stop()
        dst.stop()
    calls_per_second = (nodes + writes) / seconds
    full_seconds = (len(all_paths) + total_writes) / calls_per_second
    return {"nodes": nodes, "writes": writes, "seconds": round(seconds, 2), "sampled": nodes < len(all_paths),
            "calls_per_second": round(calls_per_second), "estimated_full_seconds": round(full_seconds, 1),
            "nodes_per_second": round(len(all_paths) / full_seconds, 1)}  # fmt: skip


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the benchmark with these arguments (default: the command line's); print its JSON."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=17_000, help="tree size (about 6 nodes per topic)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baseline-seconds", type=float, default=60.0, help="time budget of the kazoo baseline")
    parser.add_argument("--spark-master", default=None)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("kazoo") is None:  # checked before the run, not at its end
        print("metashift: error: the copy benchmark's baseline needs kazoo: pip install 'metashift[bench]'",
              file=sys.stderr)  # fmt: skip
        return 2

    from metashift.spark.copy import copy_tree
    from metashift.spark.session import get_session
    from metashift.spark.verify import verify_tree

    out: dict[str, Any] = {"topics": args.topics, "seed": args.seed, "cpus": os.cpu_count()}
    zk = LocalZooKeeper(heap_mb=4096)
    etcd = LocalEtcd(quota_backend_bytes=8 * 1024**3)
    with zk, etcd:
        assert zk.process is not None and etcd.process is not None
        servers = [zk.process.pid, etcd.process.pid]

        async def setup() -> tuple[dict[str, Any], tuple[list[str], int]]:
            store = await open_store(zk.url, watch=False)
            try:
                started = time.monotonic()
                tree = await generate(store, args.topics, args.seed, ephemerals=True)
                seconds = time.monotonic() - started
                all_paths = await _all_paths(store)
            finally:
                await store.close()
            return {"nodes": tree.persistent, "bytes": tree.bytes, "writes": tree.writes,
                    "max_version": tree.max_version, "seconds": round(seconds, 1),
                    "nodes_per_second": round(tree.persistent / seconds)}, all_paths  # fmt: skip

        out["generate"], (all_paths, total_writes) = asyncio.run(setup())
        print(f"generated: {out['generate']}", file=sys.stderr, flush=True)
        out["raw_zk_reads"] = asyncio.run(raw_zk_reads(zk.url, all_paths))
        out["raw_etcd_writes"] = asyncio.run(raw_etcd_writes(zk.url, etcd.url, all_paths))
        print(f"raw: {out['raw_zk_reads']} {out['raw_etcd_writes']}", file=sys.stderr, flush=True)

        with PeakMemory(servers) as mem:
            spark = get_session(args.spark_master)
            report = copy_tree(zk.url, etcd.url + "/copy", spark=spark)
            copy_peak = mem.peak_kb
        out["copy"] = {
            "nodes": report.nodes, "bytes": report.bytes, "seconds": round(report.seconds, 2),
            "listing_seconds": round(report.listing_seconds, 2), "copy_seconds": round(report.copy_seconds, 2),
            "counters_seconds": round(report.counters_seconds, 2), "nodes_per_second": round(report.nodes_per_second),
            "write_ops": report.write_ops, "write_amplification": round(report.write_amplification, 2),
            "write_ops_per_second": round(report.write_ops / report.seconds),
            "ephemerals_skipped": report.ephemerals_skipped, "partitions": report.partitions,
            "peak_rss_mb": round(copy_peak / 1024),
        }  # fmt: skip
        print(f"copy: {out['copy']}", file=sys.stderr, flush=True)
        with PeakMemory(servers) as mem:
            verified = verify_tree(zk.url, etcd.url + "/copy", spark=spark)
            verify_peak = mem.peak_kb
        out["verify"] = {
            "ok": verified.ok, "mismatches": len(verified.mismatches), "nodes": verified.nodes,
            "seconds": round(verified.seconds, 2), "listing_seconds": round(verified.listing_seconds, 2),
            "nodes_per_second": round(verified.nodes_per_second), "peak_rss_mb": round(verify_peak / 1024),
        }  # fmt: skip
        print(f"verify: {out['verify']}", file=sys.stderr, flush=True)
        out["kazoo_baseline"] = kazoo_baseline(zk.hosts, all_paths, total_writes, args.baseline_seconds)
        spark.stop()
    raw_read = out["raw_zk_reads"]["nodes_per_second"]
    raw_write = out["raw_etcd_writes"]["keys_per_second"]
    kazoo = out["kazoo_baseline"]["nodes_per_second"]
    out["ratios"] = {
        "copy_nodes_vs_raw_zk_reads": round(out["copy"]["nodes_per_second"] / raw_read, 3),
        "copy_nodes_vs_raw_etcd_writes": round(out["copy"]["nodes_per_second"] / raw_write, 3),
        "copy_writes_vs_raw_etcd_writes": round(out["copy"]["write_ops_per_second"] / raw_write, 3),
        "copy_vs_kazoo": round(out["copy"]["nodes_per_second"] / kazoo, 1) if kazoo else None,
        "verify_nodes_vs_raw_zk_reads": round(out["verify"]["nodes_per_second"] / raw_read, 3),
        "verify_vs_kazoo": round(out["verify"]["nodes_per_second"] / kazoo, 1) if kazoo else None,
    }
    print(json.dumps(out, indent=2))
    return 0 if out["verify"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
