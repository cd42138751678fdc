"""The verification: every persistent node's bytes and version on both sides, and the counters.

It lists the source with the copy's own listing and rules (``plan``, ``rules``), compares each
node in Spark executors (``tasks.verify_partition``, the copy's ``judge``), lists the target for
nodes that only it has, and compares the sequence counters. Each mismatch names its path.
"""

from __future__ import annotations

import bisect
import time
from typing import Any

from metashift.stores import open_store, paths
from metashift.stores.aio import run_loop as run

from . import tasks
from .job import check_urls, run_partitions
from .plan import Plan, make_plan, make_source_plan
from .report import Mismatch, NoProgress, Progress, VerifyReport, raise_task_error
from .rules import Rules, counter_ok
from .session import check_master, get_session


def verify_tree(
    source: str,
    target: str,
    *,
    master: str | None = None,
    rules: Rules | None = None,
    progress: Progress | None = None,
    spark: Any = None,
) -> VerifyReport:
    """Compare ``target`` with ``source`` (module doc). Store errors are raised; mismatches are
    returned in the report (``report.ok`` is false when there is any)."""
    rules = rules or Rules()
    progress = progress or NoProgress()
    src_url, tgt_url = check_urls(source, target)
    if spark is None:
        check_master(master)
    report = VerifyReport(str(src_url), str(tgt_url))
    started = time.monotonic()
    try:
        plan, extras, counter_mismatches = run(_list_both(source, target, rules, progress))
        report.listing_seconds = time.monotonic() - started
        report.counters = len(plan.counters)
        spark = spark or get_session(master)
        parts = [part for stage in plan.stages(spark.sparkContext.defaultParallelism) for part in stage]
        progress.start("verifying", len(plan.nodes), plan.total_bytes)
        results = run_partitions(spark, parts, tasks.verify_partition, source, target, rules, progress)
    finally:
        progress.finish()
    for r in results:
        if r["error"]:
            raise_task_error(r["error"])
    mismatches = [Mismatch(*m) for r in results for m in r["mismatches"]]
    report.nodes = sum(r["nodes"] for r in results)
    report.bytes = sum(r["bytes"] for r in results)
    report.vanished = sum(r["vanished"] for r in results)
    report.mismatches = sorted(mismatches + extras + counter_mismatches, key=lambda m: (m.path, m.kind))
    report.seconds = time.monotonic() - started
    report.nodes_per_second = report.nodes / report.seconds if report.seconds else 0.0
    return report


async def _list_both(
    source: str, target: str, rules: Rules, progress: Progress
) -> tuple[Plan, list[Mismatch], list[Mismatch]]:
    async with (
        await open_store(target, watch=False, create_root=False) as tgt,
        await open_store(source, watch=False, create_root=False) as src,
    ):
        plan = await make_source_plan(src, source, rules, lambda n: progress.listing("listing", n))
        target_plan = await make_plan(tgt, rules, lambda n: progress.listing("listing target", n))
        counters: list[Mismatch] = []
        for parent, counter in sorted(plan.counters.items()):
            have = await tgt.sequence_counter(parent)
            if not counter_ok(counter, have):
                counters.append(
                    Mismatch(parent, "counter", f"next sequential suffix {have} in the target, {counter} in the source")
                )
    return plan, _extras(plan, target_plan), counters


def _extras(plan: Plan, target_plan: Plan) -> list[Mismatch]:
    """Persistent target nodes the source does not have, except the parents of source nodes
    that the target needs and the source does not (etcd keeps no parents; ZooKeeper must), and
    the empty parents a ZooKeeper target made for ephemerals re-created in it (a migration's)."""
    source_paths = [path for path, _, _ in plan.nodes]
    known = set(source_paths)
    out = []
    for path, version, size in target_plan.nodes:
        if path in known:
            continue
        below = path + paths.SEPARATOR
        i = bisect.bisect_left(source_paths, below)
        if i < len(source_paths) and source_paths[i].startswith(below):
            continue
        if size == 0 and version == 0 and path in plan.ephemeral_ancestors:
            continue
        out.append(Mismatch(path, "extra", f"only in the target (version {version}, {size} bytes)"))
    return out
