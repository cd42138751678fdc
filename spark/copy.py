"""The bulk copy: every persistent node with its exact version, and the sequence counters.

``copy_tree(source, target)`` is what ``metashift copy`` and the coordinator call:

1. check both URLs and reach both stores (nothing is written before both answer); Spark starts
   from here on, beside the steps that follow;
2. the driver lists the top of the source (``plan.split_tree``: a few levels, until one holds
   enough nodes to share out) and copies it itself, parents first;
3. one Spark job over the subtrees below: each partition lists its subtrees in the source, reads
   both stores and judges each node (``rules.judge``): equal nodes are left alone, missing or
   behind ones are restored to the source's value and version (``Store.restore_many``, packed
   across the partition), and nodes the target has ahead of the source are conflicts: the copy
   names them (nothing is written below them);
4. the sequence counters are moved to the source's next sequential suffix by whoever copied
   their node, as soon as it is in place, while the copy goes on (those of the top by a child
   process of the driver: in a driver thread their client work would hold the GIL that Spark's
   start and the job's driver side need);
5. the target's history is compacted (etcd) whenever the copy's writes have grown its backend
   by ``compact_every_bytes`` (a driver thread watches the space the target reports in use),
   and once at the end, without waiting for etcd to free the space (it does so in the
   background and reuses it);
6. with ``verify=True``, the verification job (``verify.verify_tree``) on the same split.

A second run finds everything equal and writes nothing; a run killed half-way leaves nodes
missing or behind, which the next run completes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from metashift.copy.counters import CounterCarry, merge
from metashift.copy.report import CopyReport
from metashift.copy.rules import Rules
from metashift.stores import open_store
from metashift.stores.aio import run_loop as run

from . import tasks
from .child import ChildRun
from .job import SparkStarter, check_urls, run_partitions
from .plan import Split, min_roots, split_tree
from .report import CopyConflict, EmptySource, NoProgress, Progress, raise_task_error
from .session import check_master

#: Growth of the target's backend (data and history, etcd) between two compactions during the copy.
COMPACT_EVERY_BYTES = 256 * 1024 * 1024

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
    compact_every_bytes: int = COMPACT_EVERY_BYTES,
    keep_conflicts: bool = False,
) -> CopyReport:
    """Copy every persistent node of ``source`` to ``target`` (module doc). Raises the store's
    error (``InvalidStoreURL``, ``StoreUnavailable``, ``StoreFull``, ...) or, once the rest is
    copied, ``CopyConflict``; with ``keep_conflicts`` the conflicts are in ``report.conflicts``
    instead and the verification runs all the same (the coordinator carries them). A
    verification's mismatches are in ``report.verify`` (``report.verify.ok``)."""
    rules = rules or Rules()
    progress = progress or NoProgress()
    src_url, tgt_url = check_urls(source, target)
    if spark is None:
        check_master(master)
    report = CopyReport(str(src_url), str(tgt_url))
    started = time.monotonic()
    try:
        run(_reach(source, target))
        starter = SparkStarter(master, spark)
        compactor = Compactor(target, compact_every_bytes)
        try:
            split = run(_copy_top(source, target, rules, progress, report, starter))
            report.listing_seconds = split.listing_seconds
            copy_started = time.monotonic()
            report.timeline["top_copied"] = copy_started - started
            # the top's counters, moved by a child process beside the job (module doc)
            counters = None
            if split.deferred_counters:
                counters = ChildRun(tasks.__name__, "move_counters", source, target, split.deferred_counters, rules)
            try:
                if split.roots:
                    _copy_subtrees(starter, split, source, target, rules, progress, report)
                    report.timeline["job_done"] = time.monotonic() - started
            except BaseException:
                if counters is not None:
                    counters.kill()
                raise
            if counters is not None:
                _add(report, [counters.result()], by_executors=False)
                report.timeline["counters_done"] = counters.ended_at - started
                report.counters_seconds = counters.seconds
            report.copy_seconds = time.monotonic() - copy_started
        finally:
            compactor.stop()
        if starter.ready_at is not None:
            report.timeline["spark_ready"] = starter.ready_at - started
        report.compactions += compactor.count
        compaction_started = time.monotonic()
        if report.write_ops:
            run(_compact(target))
            report.compactions += 1
        report.compaction_seconds = time.monotonic() - compaction_started
    finally:
        progress.finish()
    report.seconds = time.monotonic() - started
    report.nodes_per_second = report.nodes / report.seconds if report.seconds else 0.0
    report.bytes_per_second = report.bytes / report.seconds if report.seconds else 0.0
    report.write_amplification = report.write_ops / report.written if report.written else 0.0
    if report.conflicts and not keep_conflicts:
        raise CopyConflict(report.conflicts)
    if verify:
        from .verify import verify_tree

        report.verify = verify_tree(
            source, target, rules=rules, progress=progress_for_verify(progress), spark=starter.get(), split=split
        )
    return report


def progress_for_verify(progress: Progress) -> Progress:
    """A fresh display of the same kind for the verification that follows a copy."""
    return type(progress)() if not isinstance(progress, NoProgress) else progress


async def _reach(source: str, target: str) -> None:
    # the target first: an unreachable target fails before anything is read from the source
    async with await open_store(target, watch=False):
        pass
    async with await open_store(source, watch=False, create_root=False):
        pass


async def _copy_top(
    source: str, target: str, rules: Rules, progress: Progress, report: CopyReport, starter: SparkStarter
) -> Split:
    """List the top of the source and copy it (the driver's part); Spark starts meanwhile."""
    async with (
        await open_store(source, watch=False, create_root=False) as src,
        await open_store(target, watch=False) as tgt,
    ):
        progress.listing("listing", 0)
        starter.start()
        split = await split_tree(src, rules, min_roots(starter.parallelism()))
        if not split.top and not split.roots:  # a mistyped chroot or prefix: not a copy of nothing
            raise EmptySource(source)
        progress.start("copying", 0, 0)
        out = await tasks.copy_top(src, tgt, split.top, rules)
    split.deferred_counters = out.get("deferred_counters", [])
    _add(report, [out], by_executors=False)
    report.listed_by_driver = split.top_nodes + len(split.roots)
    progress.update(report.nodes, report.bytes)
    return split


def _add(report: CopyReport, results: list[dict], *, by_executors: bool = True) -> None:
    """Add the tasks' counts and conflicts to ``report``; raise the first error."""
    errors = [r["error"] for r in results if r["error"]]
    conflicts = [c for r in results for c in r["conflicts"]]
    for r in results:
        for key in ("nodes", "bytes", "written", "unchanged", "vanished", "write_ops"):
            setattr(report, key, getattr(report, key) + r[key])
        report.ephemerals_skipped += r["ephemerals"]
        if by_executors:
            report.listed_by_executors += r["listed"]
        for path, entry in r["counters"].items():
            carry = CounterCarry(**entry)
            report.counters[path] = merge(report.counters[path], carry) if path in report.counters else carry
            report.counter_writes += carry.writes
            report.counter_seconds = max(report.counter_seconds, carry.seconds)
    if errors:
        errors.sort(key=lambda e: _ERROR_ORDER.index(e["type"]) if e["type"] in _ERROR_ORDER else 99)
        raise_task_error(errors[0])
    report.conflicts += [(p, why) for p, why in conflicts]


def _copy_subtrees(
    starter: SparkStarter, split: Split, source: str, target: str, rules: Rules, progress: Progress, report: CopyReport
) -> None:
    parts = split.partitions(starter.parallelism())
    report.partitions += len(parts)
    theirs = run_partitions(
        starter.get(), parts, tasks.copy_partition, source, target, rules, progress, (report.nodes, report.bytes)
    )
    _add(report, theirs, by_executors=False)
    report.listed_by_executors += sum(r["listed"] for r in theirs)


async def _compact(target: str) -> None:
    async with await open_store(target, watch=False) as store:
        await store.compact_history(wait=False)


class Compactor:
    """A driver thread that compacts the target's history whenever its backend has grown by
    ``every`` bytes over the least it took since the last compaction (read from the target
    itself, so that it sees the executors' writes as they happen; the space a compaction frees
    lowers that least)."""

    POLL_SECONDS = 0.2

    def __init__(self, target: str, every: int) -> None:
        self.target, self.every, self.count = target, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metashift-compactor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            run(self._watch())
        except Exception:  # a failing compaction must not fail the copy: the final one reports
            pass

    async def _watch(self) -> None:
        async with await open_store(self.target, watch=False) as store:
            least = await store.history_bytes()
            if least is None:
                return
            while not self._stop.is_set():
                await asyncio.sleep(self.POLL_SECONDS)
                now = await store.history_bytes()
                if now is None:
                    continue
                if now - least >= self.every:
                    await store.compact_history(wait=False)
                    self.count += 1
                    least = now
                least = min(least, now)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
