"""``metashift bench copy --beside-fresh``: the same tree copied with a fresh ledger-id generator
and with one that handed out ``--ledger-ids N`` ids, side by side in one run (a benchmark).

Both trees are made on one local ZooKeeper from the same seed (``/fresh`` and ``/issued``
chroots: the same nodes, values and versions; only ``/ledgers/idgen``'s count of creations
differs), then ``metashift copy --verify --json`` copies each into a new prefix of one local etcd,
``--rounds`` times, alternating (fresh, issued, fresh, issued, ...) so that a change of the
machine's load touches both alike. Printed per copy: seconds, the counters' carry (seconds and
writes, and per ledger-id generator how it was carried), verification; then the medians and
``issued_vs_fresh``, the ratio of the median copy times (the goal: at most 1.10).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from metashift.stores import open_store
from metashift_lab.sample_tree import generate
from metashift_lab.servers import LocalEtcd, LocalZooKeeper

#: the trees' chroots on the ZooKeeper: a fresh generator, and one that handed out ``--ledger-ids``
TREES = ("fresh", "issued")

RunCopy = Any  # metashift_lab.benchmarks.copy._run_copy (passed in: no import cycle)


async def _make(url: str, topics: int, seed: int, ledger_ids: int) -> dict[str, Any]:
    store = await open_store(url, watch=False)
    try:
        started = time.monotonic()
        tree = await generate(store, topics, seed, ephemerals=False, ledger_ids=ledger_ids)
        return {"nodes": tree.persistent, "writes": tree.writes, "counter_writes": tree.counter_writes,
                "counter_seconds": round(tree.counter_seconds, 1), "seconds": round(time.monotonic() - started, 1)}
    finally:
        await store.close()


def _summary(report: dict[str, Any], memory: dict[str, Any]) -> dict[str, Any]:
    verified = report.get("verify") or {}
    generators = {p: {k: c.get(k) for k in ("carried", "source", "target", "writes")}
                  for p, c in sorted(report.get("counters", {}).items()) if "idgen" in p}
    return {"seconds": round(report["seconds"], 2), "nodes": report["nodes"],
            "counter_seconds": round(report["counter_seconds"], 2), "counter_writes": report["counter_writes"],
            "write_ops": report["write_ops"], "verify_ok": verified.get("ok"),
            "verify_seconds": round(verified.get("seconds", 0.0), 2), "ledger_id_generators": generators,
            "wall_seconds": memory["wall_seconds"]}


def beside_fresh(topics: int, seed: int, ledger_ids: int, rounds: int, master: str | None, run_copy: RunCopy) -> int:
    """Run the side-by-side comparison; print every copy on stderr and the JSON on stdout."""
    out: dict[str, Any] = {"tree": f"topics {topics}", "seed": seed, "ledger_ids": ledger_ids, "rounds": rounds}
    zk = LocalZooKeeper(heap_mb=4096)
    etcd = LocalEtcd()
    with zk, etcd:
        assert zk.process is not None and etcd.process is not None
        servers = [zk.process.pid, etcd.process.pid]
        made = {}
        for name in TREES:  # the fresh one first: the long one then tells its cost
            made[name] = asyncio.run(_make(f"{zk.url}/{name}", topics, seed, ledger_ids if name == "issued" else 0))
            print(f"generated /{name}: {made[name]}", file=sys.stderr, flush=True)
        out["generate"] = made
        copies: dict[str, list[dict[str, Any]]] = {name: [] for name in TREES}
        for n in range(rounds):
            for name in TREES:
                report, memory = run_copy(f"{zk.url}/{name}", f"{etcd.url}/{name}-{n}", master, servers)
                row = _summary(report, memory)
                copies[name].append(row)
                print(f"copy /{name} round {n + 1}: {json.dumps(row)}", file=sys.stderr, flush=True)
        out["copies"] = copies
    medians = {name: statistics.median(r["seconds"] for r in copies[name]) for name in TREES}
    out["median_seconds"] = medians
    out["issued_vs_fresh"] = round(medians["issued"] / medians["fresh"], 3)
    print(json.dumps(out, indent=2))
    ok = all(r["verify_ok"] for rows in copies.values() for r in rows)
    return 0 if ok else 1
