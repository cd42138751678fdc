"""``metashift copy --verify`` against this machine's floor and a naive baseline, from one run
(a benchmark, not a test).

On one generated tree (``metashift_lab.sample_tree``, or ``--flat N`` nodes at version 0 under one
parent) on a local ZooKeeper, copied to a local etcd with its default 2 GiB quota (or, with
``--target-kind oxia``, to a local Oxia standalone server of 4 shards):

- ``floor``: what the servers take for the same work driven directly, each part at its raw
  rate: ``source_reads`` (every node read from ZooKeeper once, pipelined getData requests, one
  per node), ``store_writes``
  (as many etcd writes as the copy makes: the sum of V+1 over the nodes, and the steps of the
  sequence counters, in txns of 128 distinct keys, several in flight; into Oxia: every node
  written once with the version overrides a copy uses, pipelined per shard:
  ``metashift_lab.benchmarks.oxia_floor``) and ``verify_reads`` (the source read once more);
- ``floor_multi_read``: the same with the reads in ZooKeeper's multiRead requests, as the copy
  and the verification read (a getData inside a multiRead costs ZooKeeper a fraction of a
  request of its own): the lower floor, and the copy's ratio to it;
- ``copy`` and ``verify``: ``metashift copy --verify --json`` run as a user runs it (its own
  process, Spark ``local[*]`` started inside it), times from its report;
- ``ratios``: copy against source reads + store writes, verify against verify reads, and
  copy + verify against the whole floor (the goal: within 1.5x);
- ``kazoo_baseline``: a plain sequential kazoo copy ZooKeeper -> ZooKeeper of the same tree
  (get, create, then set_data until the version matches), run for at most ``--baseline-seconds``
  and extrapolated to the whole tree; and how many times faster copy + verify is;
- ``memory``: peak resident memory of the copy's driver (the Python process that runs
  ``metashift copy``), and of everything it started (its JVM and Python workers).

    metashift bench copy --topics 17000       # ~100k nodes
    metashift bench copy --topics 17000 --target-kind oxia   # the same into Oxia, beside Oxia's floor
    metashift bench copy --topics 170000      # ~1M nodes
    metashift bench copy --flat 50000         # 50k nodes at version 0 under one parent
    metashift bench copy --topics 17000 --ledger-ids 100000000   # a generator that issued 10^8 ids
    metashift bench copy --topics 17000 --ledger-ids 100000000 --beside-fresh   # and the same tree
                                  # with a fresh generator, copied alternately in one run

``--ledger-ids N`` / ``--producer-names N``: the tree's ledger-id generator (carried by a jump)
and producer-name counter (carried exactly) have handed out that many ids; ``copy.counters``
says, per counter, how it was carried, its writes and seconds (``counter_writes``,
``counter_seconds``: all of them), and ``generate`` what raising them cost.

The kazoo baseline needs kazoo, which metashift itself does not: ``pip install 'metashift[bench]'``
(the test extras have it too).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from metashift.copy.ledger_ids import issued_below
from metashift.copy.rules import Rules
from metashift.stores import DeleteOp, PutOp, Restore, Store, open_store
from metashift_lab.benchmarks.counters import beside_fresh
from metashift_lab.benchmarks.oxia_floor import raw_oxia_writes
from metashift_lab.cli_runner import start_cli
from metashift_lab.sample_tree import generate
from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper


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
    """Samples the summed RSS of a process (``root``, default this one) and its descendants,
    minus excluded subtrees; and the peak of ``root`` alone."""

    def __init__(self, exclude: list[int], root: int | None = None) -> None:
        self.exclude = set(exclude)
        self.root = root
        self.peak_kb = 0
        self.root_peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            tree = _children()
            root = self.root or os.getpid()
            self.root_peak_kb = max(self.root_peak_kb, _rss_kb(root))
            total, todo = 0, [root]
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
    """The paths the copy copies, and the store writes it makes on an etcd target: V+1 puts per
    node (a version is kept by counting puts), and the steps that bring each plain sequence
    counter (the parent key's version) from V+1 to the source's next sequential suffix (a
    ledger-id generator's nodes: one write each, and its jump: two)."""
    rules = Rules()
    out: list[str] = []
    writes = 0
    async for page in store.walk(prune=rules.excluded):
        for n in page:
            if not n.ephemeral:
                out.append(n.path)
                if rules.ledger_root_of(n.path) is not None:
                    writes += 2
                    continue
                writes += n.version + 1
                if rules.is_counter(n.path):
                    writes += max(0, await issued_below(store, n.path) - (n.version + 1))
    return out, writes


async def raw_zk_reads(url: str, all_paths: list[str], multi_read: bool = False) -> dict[str, Any]:
    """Every node read once with ``read_many``: pipelined getData requests, one per node (the
    floor's reads, as issue 11 defines them), or with ``multi_read`` in ZooKeeper's multiRead
    requests, as the copy reads (a lower floor, printed beside the other)."""
    store = await open_store(url + ("" if multi_read else "?multi_read=false"), watch=False)
    try:
        started = time.monotonic()
        nbytes = 0
        sem = asyncio.Semaphore(2)

        async def read(chunk: list[str]) -> None:
            nonlocal nbytes
            async with sem:
                for r in await store.read_many(chunk):
                    if r is not None:
                        nbytes += len(r.value)

        await asyncio.gather(*(read(all_paths[i : i + 2000]) for i in range(0, len(all_paths), 2000)))
        seconds = time.monotonic() - started
    finally:
        await store.close()
    return {"nodes": len(all_paths), "bytes": nbytes, "seconds": round(seconds, 2),
            "nodes_per_second": round(len(all_paths) / seconds)}  # fmt: skip


async def raw_etcd_writes(zk_url: str, etcd_url: str, all_paths: list[str], writes: int) -> dict[str, Any]:
    """``writes`` blind puts: every node's value once, then empty values round the nodes again
    (as a version-keeping copy writes), in txns of 128 distinct keys, several in flight. The keys
    are deleted and the history compacted afterwards (untimed), so the copy starts from room."""
    source = await open_store(zk_url, watch=False)
    target = await open_store(etcd_url + "/raw-writes", watch=False)
    try:
        values: list[tuple[str, bytes]] = []
        for i in range(0, len(all_paths), 2000):
            for r in await source.read_many(all_paths[i : i + 2000]):
                if r is not None:
                    values.append((r.path, r.value))
        n = len(values)
        started = time.monotonic()
        sem = asyncio.Semaphore(2)

        async def write(first: int, count: int) -> None:
            ops = []
            for k in range(first, first + count):
                path, value = values[k % n]
                ops.append(PutOp(path, value if k < n else b""))
            async with sem:
                for r in await target.batch(ops):
                    if isinstance(r, Exception):
                        raise r

        step = min(1024, n)
        await asyncio.gather(*(write(i, min(step, writes - i)) for i in range(0, writes, step)))
        seconds = time.monotonic() - started
        for i in range(0, n, 1024):  # untimed: leave the room to the copy
            await target.batch([DeleteOp(path) for path, _ in values[i : i + 1024]])
        await target.compact_history()
    finally:
        await source.close()
        await target.close()
    return {"writes": writes, "seconds": round(seconds, 2), "writes_per_second": round(writes / seconds)}


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


async def _flat_tree(store: Store, nodes: int, seed: int) -> dict[str, Any]:
    """``nodes`` children of ``/flat`` at version 0, values of 100 B - 2 KB."""
    rng = random.Random(seed)
    started = time.monotonic()
    await store.restore("/flat", b"", 0)
    total = 0
    for i in range(0, nodes, 2000):
        items = []
        for k in range(i, min(nodes, i + 2000)):
            value = rng.randbytes(rng.randint(100, 2000))
            total += len(value)
            items.append(Restore(f"/flat/n-{k:08d}", value, 0))
        await store.restore_many(items)
    seconds = time.monotonic() - started
    return {"nodes": nodes + 1, "bytes": total, "writes": nodes + 1, "max_version": 0, "seconds": round(seconds, 1)}


def _run_copy(zk_url: str, etcd_url: str, master: str | None, servers: list[int]) -> tuple[dict[str, Any], dict]:
    """``metashift copy --verify --json`` in its own process; its report and peak memory."""
    args = ["copy", "--source", zk_url, "--target", etcd_url, "--verify", "--json"]
    args += ["--spark-master", master] if master else []
    started = time.monotonic()
    proc = start_cli(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with PeakMemory(servers, root=proc.pid) as mem:
        stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"metashift copy failed ({proc.returncode}): {stderr.strip()[-2000:]}")
    memory = {"driver_peak_mb": round(mem.root_peak_kb / 1024), "job_peak_mb": round(mem.peak_kb / 1024),
              "wall_seconds": round(wall, 2)}  # fmt: skip
    return json.loads(stdout), memory


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the benchmark with these arguments (default: the command line's); print its JSON."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=17_000, help="tree size (about 6 nodes per topic)")
    parser.add_argument("--flat", type=int, default=0, metavar="N", help="a flat tree of N nodes at version 0 instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ledger-ids", type=int, default=0, metavar="N",
                        help="the ledger ids the tree's generator has handed out (below 2^31 - 1)")
    parser.add_argument("--producer-names", type=int, default=0, metavar="N",
                        help="the ids the tree's producer-name counter has handed out")
    parser.add_argument("--baseline-seconds", type=float, default=60.0, help="time budget of the kazoo baseline")
    parser.add_argument("--spark-master", default=None)
    parser.add_argument("--etcd-quota", type=int, default=0, help="etcd --quota-backend-bytes (default etcd's: 2 GiB)")
    parser.add_argument("--target-kind", choices=["etcd", "oxia"], default="etcd",
                        help="the target store (default etcd); its floor is its own raw writes")
    parser.add_argument("--beside-fresh", action="store_true",
                        help="copy the tree with --ledger-ids N issued and the same tree with a fresh generator, "
                             "side by side (metashift_lab.benchmarks.counters); no floor, no baseline")
    parser.add_argument("--rounds", type=int, default=2, help="with --beside-fresh: copies of each tree")
    args = parser.parse_args(argv)
    if args.beside_fresh:
        if args.flat or args.ledger_ids <= 0 or args.rounds < 1:
            parser.error("--beside-fresh takes --topics, --ledger-ids N > 0 and --rounds >= 1 (not --flat)")
        return beside_fresh(args.topics, args.seed, args.ledger_ids, args.rounds, args.spark_master, _run_copy)
    if importlib.util.find_spec("kazoo") is None:  # checked before the run, not at its end
        print("metashift: error: the copy benchmark's baseline needs kazoo: pip install 'metashift[bench]'",
              file=sys.stderr)  # fmt: skip
        return 2

    out: dict[str, Any] = {"tree": f"flat {args.flat}" if args.flat else f"topics {args.topics}", "seed": args.seed,
                           "cpus": os.cpu_count(), "ledger_ids": args.ledger_ids,
                           "producer_names": args.producer_names, "target": args.target_kind}  # fmt: skip
    zk = LocalZooKeeper(heap_mb=4096)
    etcd: LocalEtcd | LocalOxia = (LocalOxia() if args.target_kind == "oxia"
                                   else LocalEtcd(quota_backend_bytes=args.etcd_quota or None))
    with zk, etcd:
        assert zk.process is not None and etcd.process is not None
        servers = [zk.process.pid, etcd.process.pid]

        async def setup() -> tuple[dict[str, Any], tuple[list[str], int]]:
            store = await open_store(zk.url, watch=False)
            try:
                started = time.monotonic()
                if args.flat:
                    made = await _flat_tree(store, args.flat, args.seed)
                else:
                    tree = await generate(store, args.topics, args.seed, ephemerals=True, ledger_ids=args.ledger_ids,
                                          producer_names=args.producer_names)  # fmt: skip
                    made = {"nodes": tree.persistent, "bytes": tree.bytes, "writes": tree.writes,
                            "max_version": tree.max_version, "counters": tree.counters,
                            "counter_writes": tree.counter_writes,
                            "counter_seconds": round(tree.counter_seconds, 1)}  # fmt: skip
                made["seconds"] = round(time.monotonic() - started, 1)
                all_paths = await _all_paths(store)
            finally:
                await store.close()
            return made, all_paths

        out["generate"], (all_paths, total_writes) = asyncio.run(setup())
        print(f"generated: {out['generate']}", file=sys.stderr, flush=True)
        reads = asyncio.run(raw_zk_reads(zk.url, all_paths))
        if isinstance(etcd, LocalOxia):
            writes = asyncio.run(raw_oxia_writes(zk.url, etcd.url + "/raw-writes", all_paths))
        else:
            writes = asyncio.run(raw_etcd_writes(zk.url, etcd.url, all_paths, total_writes))
        reads2 = asyncio.run(raw_zk_reads(zk.url, all_paths))
        floor = {"source_reads": reads, "store_writes": writes, "verify_reads": reads2,
                 "seconds": round(reads["seconds"] + writes["seconds"] + reads2["seconds"], 2)}  # fmt: skip
        out["floor"] = floor
        print(f"floor: {floor}", file=sys.stderr, flush=True)
        multi = [asyncio.run(raw_zk_reads(zk.url, all_paths, multi_read=True)) for _ in range(2)]
        out["floor_multi_read"] = {"source_reads": multi[0], "store_writes": writes, "verify_reads": multi[1],
                                   "seconds": round(multi[0]["seconds"] + writes["seconds"] + multi[1]["seconds"], 2)}
        print(f"floor with multiRead reads: {out['floor_multi_read']}", file=sys.stderr, flush=True)

        report, memory = _run_copy(zk.url, etcd.url + "/copy", args.spark_master, servers)
        verified = report.get("verify") or {}
        copy_s = report["seconds"]
        verify_s = verified.get("seconds", 0.0)
        out["copy"] = {
            "nodes": report["nodes"], "bytes": report["bytes"], "seconds": round(copy_s, 2),
            "listing_seconds": round(report["listing_seconds"], 2), "copy_seconds": round(report["copy_seconds"], 2),
            "counters_seconds": round(report["counters_seconds"], 2),
            "timeline": {k: round(v, 1) for k, v in report.get("timeline", {}).items()},
            "final_compaction_seconds": round(report.get("compaction_seconds", 0.0), 2),
            "nodes_per_second": round(report["nodes_per_second"]), "write_ops": report["write_ops"],
            "write_amplification": round(report["write_amplification"], 2), "partitions": report["partitions"],
            "compactions": report["compactions"], "listed_by_driver": report["listed_by_driver"],
            "listed_by_executors": report["listed_by_executors"],
            "counter_writes": report["counter_writes"], "counter_seconds": round(report["counter_seconds"], 2),
            "counters": {p: {k: c[k] for k in ("carried", "source", "target", "writes")} | {
                "seconds": round(c["seconds"], 2)} for p, c in sorted(report["counters"].items())},
        }  # fmt: skip
        out["verify"] = {
            "ok": verified.get("ok"), "mismatches": verified.get("mismatch_count"), "nodes": verified.get("nodes"),
            "seconds": round(verify_s, 2), "nodes_per_second": round(verified.get("nodes_per_second", 0)),
        }  # fmt: skip
        out["memory"] = memory
        print(f"copy: {out['copy']}\nverify: {out['verify']}\nmemory: {memory}", file=sys.stderr, flush=True)
        out["kazoo_baseline"] = kazoo_baseline(zk.hosts, all_paths, total_writes, args.baseline_seconds)
    kazoo_s = out["kazoo_baseline"]["estimated_full_seconds"]
    out["ratios"] = {
        "copy_vs_floor": round(copy_s / (reads["seconds"] + writes["seconds"]), 2),
        "verify_vs_floor": round(verify_s / reads2["seconds"], 2),
        "copy_and_verify_vs_floor": round((copy_s + verify_s) / floor["seconds"], 2),
        "copy_and_verify_vs_multi_read_floor": round((copy_s + verify_s) / out["floor_multi_read"]["seconds"], 2),
        "kazoo_vs_copy_and_verify": round(kazoo_s / (copy_s + verify_s), 1),
    }
    print(json.dumps(out, indent=2))
    return 0 if out["verify"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
