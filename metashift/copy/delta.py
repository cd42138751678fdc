"""Carrying a handful of changed paths over, and checking exactly those: the online pre-copy's
passes and the freeze's last delta. It goes through the store layer directly (no Spark job): a
delta is small. The judgement of a node is the bulk copy's own (``rules.judge``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from metashift.stores import (
    AlreadyExists,
    DeleteOp,
    GetOp,
    MetadataStoreError,
    NotFound,
    OpResult,
    Restore,
    Store,
    paths,
)

from . import counters
from .counters import CounterCarry, CounterCheck
from .report import Mismatch
from .rules import Judgement, Rules, Side, Verdict, judge, restore_version

#: Paths read per batch.
_CHUNK = 500


@dataclass
class DeltaReport:
    """What one delta pass did."""

    paths: int = 0
    written: int = 0
    deleted: int = 0
    write_ops: int = 0
    counters: dict[str, CounterCarry] = field(default_factory=dict)
    """What the carry did to each counter (``counters.carry``): O(1) writes for a ledger-id
    generator however many ids the source handed out since the last pass."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)


def side_of(result: OpResult) -> Side | None:
    """A ``get``'s answer as the judgement sees it (``None``: no node)."""
    if isinstance(result, MetadataStoreError):
        raise result
    if result is None:
        return None
    assert isinstance(result, tuple)
    value, stat = result
    return Side(value, stat.version, stat.ephemeral)


async def _read(source: Store, target: Store, chunk: list[str]) -> list[tuple[str, Side | None, Side | None]]:
    ops = [GetOp(p) for p in chunk]
    # both stores at once: a delta's time is its round trips
    got_source, got_target = await asyncio.gather(source.batch(ops), target.batch(ops))
    return [(p, side_of(s), side_of(t)) for p, s, t in zip(chunk, got_source, got_target, strict=True)]


def _depth(path: str) -> int:
    return path.count(paths.SEPARATOR)


def _unfenced() -> None:
    pass


async def carry(
    source: Store, target: Store, changed: Collection[str], rules: Rules, fence: Callable[[], None] | None = None
) -> DeltaReport:
    """Make the target hold what the source holds now at each of ``changed``: restore what is
    missing or behind (parents first), delete what the source no longer has (children first),
    re-create what was deleted and created again in the source, then carry the counters whose
    children changed (``counters.carry``). Ephemerals are the agents' business and excluded
    subtrees are left alone. ``fence()`` is called right before every write to the target and
    raises when the caller may no longer write there (a coordinator whose leader lease ran out:
    what it read may be stale, and the target may already serve clients)."""
    fence = fence or _unfenced
    report = DeltaReport()
    # the ids a ledger-id generator took meanwhile (made and deleted at once) are not read back,
    # one by one: their counter is carried below, in the same writes however many there were
    wanted = sorted({p for p in changed if not rules.is_excluded(p) and not rules.is_generated_id(p)},
                    key=lambda p: (_depth(p), p))  # fmt: skip
    report.paths = len(wanted)
    deletions: list[str] = []
    made: set[str] = set()
    for start in range(0, len(wanted), _CHUNK):
        restores: list[Restore] = []
        for path, src, tgt in await _read(source, target, wanted[start : start + _CHUNK]):
            if src is None or src.ephemeral:
                if tgt is not None and not tgt.ephemeral:
                    deletions.append(path)
                continue
            keep = rules.keeps_version(path)
            verdict = judge(src, tgt, counter=rules.is_counter(path), keep_version=keep).verdict
            if verdict is Verdict.EQUAL:
                continue
            if verdict is Verdict.CONFLICT:
                if tgt is not None and tgt.ephemeral:
                    report.conflicts.append((path, "the target holds an ephemeral there"))
                    continue
                # deleted and created again in the source: its version started over
                fence()
                await _delete_all(target, [path], report)
                tgt = None
            current = None if tgt is None else tgt.version
            version = restore_version(src.version, current, keep)
            restores.append(Restore(path, src.value, version, -1 if current is None else current))
        fence()
        results = await target.restore_many(restores)
        orphans = [r for r, res in zip(restores, results, strict=True) if isinstance(res, NotFound)]
        if orphans:  # a store that keeps parents (ZooKeeper) lacks one the source (etcd) never had
            for restore in orphans:
                fence()
                await _ensure_parents(target, restore.path, report, made)
            fence()
            again = dict(zip((r.path for r in orphans), await target.restore_many(orphans), strict=True))
            results = [again.get(r.path, res) for r, res in zip(restores, results, strict=True)]
        for restore, result in zip(restores, results, strict=True):
            if isinstance(result, MetadataStoreError):
                report.conflicts.append((restore.path, str(result)))
            else:
                report.written += 1
                report.write_ops += result
    fence()
    await _delete_all(target, sorted(deletions, key=lambda p: (-_depth(p), p)), report)
    for path in counters_touched(changed, rules):
        fence()  # a counter only ever goes up: a late step is harmless, yet none is made
        carried = await counters.carry(source, target, path, rules)
        counters.merge_into(report.counters, carried)
        report.write_ops += sum(c.writes for c in carried.values())
    return report


def counters_touched(changed: Collection[str], rules: Rules) -> list[str]:
    """The counters whose children (or, for a ledger-id generator, any of whose nodes) are
    among ``changed``: each counter once (a generator's node by node: a jump carries the whole
    generator at the first and finds nothing more to do at the others; an exact carry needs
    each)."""
    found: set[str] = set()
    for path in changed:
        if rules.ledger_root_of(path) is not None:  # a node of the generator itself (a HOB- node made or gone)
            found.add(path)
            continue
        parent = paths.parent(path)
        if parent and rules.is_counter(parent):
            found.add(parent)
    return sorted(found)


async def _ensure_parents(target: Store, path: str, report: DeltaReport, made: set[str]) -> None:
    """A store that keeps parents (ZooKeeper) needs them before a child: an empty one where the
    source (etcd) has none. ``made``: the ancestors already seen to exist."""
    for ancestor in paths.ancestors(path):
        if ancestor in made:
            continue
        try:
            await target.put(ancestor, b"", expected_version=-1)
            report.write_ops += 1
        except AlreadyExists:
            pass
        made.add(ancestor)


async def _delete_all(target: Store, doomed: list[str], report: DeltaReport) -> None:
    if not doomed:
        return
    for path, result in zip(doomed, await target.batch([DeleteOp(p) for p in doomed]), strict=True):
        if isinstance(result, NotFound) or result is None:
            report.deleted += result is None
            continue
        if isinstance(result, MetadataStoreError):
            report.conflicts.append((path, str(result)))


async def check(
    source: Store, target: Store, changed: Collection[str], rules: Rules, states: dict[str, CounterCheck] | None = None
) -> list[Mismatch]:
    """Exactly ``changed`` compared on both sides (and the counters above them): each mismatch as
    the full verification reports it. A path the source no longer has must be gone from the target
    too. ``states``: where to put what the counters' checks found."""
    mismatches: list[Mismatch] = []
    wanted = sorted(p for p in changed if not rules.is_excluded(p) and not rules.is_generated_id(p))
    for start in range(0, len(wanted), _CHUNK):
        for path, src, tgt in await _read(source, target, wanted[start : start + _CHUNK]):
            if src is None or src.ephemeral:
                if tgt is not None and not tgt.ephemeral:
                    mismatches.append(Mismatch(path, "extra", "only in the target: deleted in the source"))
                continue
            keep = rules.keeps_version(path)
            j: Judgement = judge(src, tgt, counter=rules.is_counter(path), keep_version=keep)
            if j.verdict is not Verdict.EQUAL:
                mismatches.append(Mismatch(path, j.kind, j.detail))
    for path in counters_touched(changed, rules):  # what the full verification checks
        for at, state in (await counters.check(source, target, path, rules)).items():
            if states is not None:
                states[at] = state
            if not state.ok:
                mismatches.append(Mismatch.from_value(counters.mismatch(at, state)))
    return mismatches
