"""The bulk copy: every persistent node with its exact version, and the sequence counters.

``copy_tree(source, target)`` is what ``metashift copy`` and the coordinator call:

1. check both URLs and reach both stores (nothing is written before both answer);
2. list the source in the driver (``plan.make_plan``): persistent nodes with version and size,
   ephemerals counted and skipped, ``/zookeeper`` and ``/pulsar/migration-coordinator`` pruned,
   the sequence counters read;
3. one Spark job per depth (parents first), each partition read from both stores by the
   executor and judged (``rules.judge``): equal nodes are left alone, missing or behind ones
   are restored to the source's value and version (``Store.restore_many``), and nodes
   the target has ahead of the source are conflicts: the copy stops and names them;
4. the counters: each target counter is advanced past the source's;
5. the target's history is compacted (etcd) when anything was written, and also during the copy
   every ``compact_every`` writes, so that the history the replayed versions leave never grows
   past that much (etcd counts it against its quota until compacted);
6. with ``verify=True``, the verification job (``verify.verify_tree``).

A second run finds everything equal and writes nothing; a run killed half-way leaves nodes
missing or behind, which the next run completes.
"""

from __future__ import annotations

import time
from typing import Any

from metashift.stores import open_store
from metashift.stores.aio import run_loop as run

from . import tasks
from .job import check_urls, run_partitions
from .plan import Item, Plan, make_source_plan
from .report import CopyConflict, CopyReport, CounterReport, NoProgress, Progress, raise_task_error
from .rules import Rules
from .session import check_master, get_session

#: Target writes between two compactions of its history during the copy (the groups of
#: partitions run between compactions are cut at about this many writes).
COMPACT_EVERY_WRITES = 1_000_000

#: Order in which executor errors are raised when several partitions failed: the most telling first.
_ERROR_ORDER = ("StoreFull", "ValueTooLarge", "AuthFailed", "StoreUnavailable")


def copy_tree(
    source: str,
    target: str,
    *,
    master: str | None = None,
    verify: bool = False,
    rules: Rules | None = None,
    progress: Progress | None = None,
    spark: Any = None,
    compact_every: int = COMPACT_EVERY_WRITES,
) -> CopyReport:
    """Copy every persistent node of ``source`` to ``target`` (module doc). Raises the store's
    error (``InvalidStoreURL``, ``StoreUnavailable``, ``StoreFull``, ...) or ``CopyConflict``;
    a verification's mismatches are in ``report.verify`` (``report.verify.ok``)."""
    rules = rules or Rules()
    progress = progress or NoProgress()
    src_url, tgt_url = check_urls(source, target)
    if spark is None:
        check_master(master)
    report = CopyReport(str(src_url), str(tgt_url))
    started = time.monotonic()
    try:
        plan = run(_prepare(source, target, rules, progress))
        report.listing_seconds = plan.listing_seconds
        report.ephemerals_skipped = plan.ephemerals
        spark = spark or get_session(master)
        copy_started = time.monotonic()
        compacted_at = _copy_nodes(spark, plan, source, target, rules, progress, report, compact_every)
        report.copy_seconds = time.monotonic() - copy_started
        counters_started = time.monotonic()
        run(_finish(target, plan, report, compacted_at))
        report.counters_seconds = time.monotonic() - counters_started
    finally:
        progress.finish()
    report.seconds = time.monotonic() - started
    report.nodes_per_second = report.nodes / report.seconds if report.seconds else 0.0
    report.bytes_per_second = report.bytes / report.seconds if report.seconds else 0.0
    report.write_amplification = report.write_ops / report.written if report.written else 0.0
    if verify:
        from .verify import verify_tree

        report.verify = verify_tree(source, target, rules=rules, progress=progress_for_verify(progress), spark=spark)
    return report


def progress_for_verify(progress: Progress) -> Progress:
    """A fresh display of the same kind for the verification that follows a copy."""
    return type(progress)() if not isinstance(progress, NoProgress) else progress


async def _prepare(source: str, target: str, rules: Rules, progress: Progress) -> Plan:
    # reach the target first: an unreachable target fails before a long listing of the source
    async with await open_store(target, watch=False):
        pass
    async with await open_store(source, watch=False, create_root=False) as store:
        return await make_source_plan(store, source, rules, lambda n: progress.listing("listing", n))


def _copy_nodes(
    spark: Any,
    plan: Plan,
    source: str,
    target: str,
    rules: Rules,
    progress: Progress,
    report: CopyReport,
    compact_every: int,
) -> int:
    """Run the copy's stages; returns ``report.write_ops`` as of the last compaction."""
    stages = plan.stages(spark.sparkContext.defaultParallelism)
    progress.start("copying", len(plan.nodes), plan.total_bytes)
    done = (0, 0)
    compacted_at = 0
    for stage in stages:
        for parts in _groups(stage, compact_every):
            report.partitions += len(parts)
            results = run_partitions(spark, parts, tasks.copy_partition, source, target, rules, progress, done)
            errors = [r["error"] for r in results if r["error"]]
            conflicts = [c for r in results for c in r["conflicts"]]
            for r in results:
                for key in ("nodes", "bytes", "written", "unchanged", "vanished", "write_ops"):
                    setattr(report, key, getattr(report, key) + r[key])
                report.ephemerals_skipped += r["ephemerals"]
            done = (done[0] + sum(len(p) for p in parts), report.bytes)
            if errors:
                errors.sort(key=lambda e: _ERROR_ORDER.index(e["type"]) if e["type"] in _ERROR_ORDER else 99)
                raise_task_error(errors[0])
            if conflicts:
                # deeper stages would write children under nodes the copy could not bring over
                raise CopyConflict([(p, why) for p, why in conflicts])
            if report.write_ops - compacted_at >= compact_every:
                run(_compact(target))
                report.compactions += 1
                compacted_at = report.write_ops
    return compacted_at


def _groups(parts: list[list[Item]], max_work: int) -> list[list[list[Item]]]:
    """Consecutive runs of ``parts`` of at most ``max_work`` writes each (at least one part)."""
    groups: list[list[list[Item]]] = [[]]
    work = 0
    for part in parts:
        cost = sum(version + 1 for _, version, _ in part)
        if groups[-1] and work + cost > max_work:
            groups.append([])
            work = 0
        groups[-1].append(part)
        work += cost
    return groups


async def _compact(target: str) -> None:
    async with await open_store(target, watch=False) as store:
        await store.compact_history()


async def _finish(target: str, plan: Plan, report: CopyReport, compacted_at: int) -> None:
    """Carry the counters over, then compact the target's history if anything was written since
    the last compaction (``compacted_at``: ``report.write_ops`` then)."""
    async with await open_store(target, watch=False) as store:
        for parent, counter in sorted(plan.counters.items()):
            before = await store.sequence_counter(parent)
            writes = 0
            if before < counter:
                writes = await store.advance_sequence_counter(parent, counter)
            after = await store.sequence_counter(parent) if writes else before
            report.counters[parent] = CounterReport(counter, before, after, writes)
            report.write_ops += writes
        if report.write_ops > compacted_at:
            await store.compact_history()
            report.compactions += 1
