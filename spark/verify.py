"""The verification: every persistent node's bytes and version on both sides, and the counters.

It splits the tree as the copy does (``plan.split_tree``; after a copy, the copy's own split is
reused and the source is not listed again): the driver compares the top of the tree, Spark
executors list and compare the subtrees below on both sides (``tasks.verify_partition``, the
copy's ``judge``), nodes that only the target has included, and the sequence counters. Each
mismatch names its path.
"""

from __future__ import annotations

import time
from typing import Any

from metashift.copy.counters import CounterCheck
from metashift.copy.report import Mismatch, VerifyReport
from metashift.copy.rules import Rules
from metashift.stores import open_store
from metashift.stores.aio import run_loop as run

from . import tasks
from .job import SparkStarter, check_urls, run_partitions
from .plan import Split, min_roots, split_tree
from .report import EmptySource, NoProgress, Progress, raise_task_error
from .session import check_master


def verify_tree(
    source: str,
    target: str,
    *,
    master: str | None = None,
    rules: Rules | None = None,
    progress: Progress | None = None,
    spark: Any = None,
    split: Split | None = None,
) -> VerifyReport:
    """Compare ``target`` with ``source`` (module doc). Store errors are raised; mismatches are
    returned in the report (``report.ok`` is false when there is any). ``split``: the copy's,
    when it has just run on the same source."""
    rules = rules or Rules()
    progress = progress or NoProgress()
    src_url, tgt_url = check_urls(source, target)
    if spark is None:
        check_master(master)
    report = VerifyReport(str(src_url), str(tgt_url))
    started = time.monotonic()
    starter = SparkStarter(master, spark)
    try:
        split, top = run(_verify_top(source, target, rules, progress, starter, split))
        report.listing_seconds = split.listing_seconds
        results = [top]
        if split.roots:
            parts = split.partitions(starter.parallelism())
            results += run_partitions(
                starter.get(), parts, tasks.verify_partition, source, target, rules, progress,
                (top["nodes"], top["bytes"]),
            )
    finally:
        progress.finish()
    for r in results:
        if r["error"]:
            raise_task_error(r["error"])
    mismatches = [Mismatch.from_value(m) for m in sorted({tuple(m) for r in results for m in r["mismatches"]})]
    report.nodes = sum(r["nodes"] for r in results)
    report.bytes = sum(r["bytes"] for r in results)
    report.vanished = sum(r["vanished"] for r in results)
    report.counters = sum(r["counters"] for r in results)
    for r in results:  # a ledger-id generator is checked by every task that meets one of its nodes
        for path, state in r["counter_checks"].items():
            report.counter_checks[path] = CounterCheck(**state)
    report.listed_by_driver = split.top_nodes + len(split.roots)
    report.listed_by_executors = sum(r["listed"] for r in results[1:])
    report.mismatches = sorted(mismatches, key=lambda m: (m.path, m.kind))
    report.seconds = time.monotonic() - started
    report.nodes_per_second = report.nodes / report.seconds if report.seconds else 0.0
    return report


async def _verify_top(
    source: str, target: str, rules: Rules, progress: Progress, starter: SparkStarter, split: Split | None
) -> tuple[Split, dict]:
    async with (
        await open_store(target, watch=False, create_root=False) as tgt,
        await open_store(source, watch=False, create_root=False) as src,
    ):
        if split is None:
            progress.listing("listing", 0)
            starter.start()
            split = await split_tree(src, rules, min_roots(starter.parallelism()))
            if not split.top and not split.roots:  # a mistyped chroot or prefix
                raise EmptySource(source)
        else:
            starter.start()
        progress.start("verifying", 0, 0)
        top = await tasks.verify_top(src, tgt, split.top, split.children, rules)
    progress.update(top["nodes"], top["bytes"])
    return split, top
