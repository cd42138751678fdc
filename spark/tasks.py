"""What runs in the Spark executors (and, for the top of the tree, in the driver): the copy and
the verification of whole subtrees, listing included.

Pickle-safe by construction: module-level functions over plain data (URL strings, ``Rules``, lists
of root paths). Each task opens its own source and target stores (without watches), runs its
asyncio loop, and returns one plain dict. Store errors do not escape as task failures (Spark would
retry or wrap them): they come back in the dict, named, and the driver raises them.

The copy of one partition streams: the source's subtrees are read page by page (breadth first,
``Store.read_trees``), each page's target side read (``Store.read_many``) and judged
(``rules.judge``), and the restores are packed across pages (``Store.restore_many`` of up to
``MAX_PENDING_WRITES`` writes: one etcd txn carries 128 distinct keys whatever the chunk they came
from). A target that needs parents first (ZooKeeper) gets the pending restores before any node
of a deeper level. A sequence counter is carried (``counters.carry``) as soon as its node is in
place, while the copy goes on; a ledger-id generator once per task, whichever of its nodes comes
first.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from metashift.copy import counters
from metashift.copy.rules import Judgement, Rules, Side, Verdict, judge, restore_version
from metashift.stores import (
    BadVersion,
    MetadataStoreError,
    NodeRead,
    Restore,
    Store,
    open_store,
    paths,
)
from metashift.stores.aio import run_loop

#: A partition that failed because a store did not answer is run again (the copy resumes where
#: it stopped: it reads the target first), after 2 s, then 4 s.
RETRIES = 2
#: Restores held before they are sent: writes, bytes.
MAX_PENDING_WRITES = 50_000
MAX_PENDING_BYTES = 32 * 1024 * 1024


def _error(e: MetadataStoreError) -> dict[str, Any]:
    return {"type": type(e).__name__, "message": str(e), "path": e.path}


def _side(node: NodeRead | None) -> Side | None:
    return None if node is None else Side(node.value, node.version, node.ephemeral)


async def _with_stores(
    source_url: str, target_url: str, body: Callable[[Store, Store], Awaitable[None]]
) -> None:
    source = await open_store(source_url, watch=False, create_root=False)
    try:
        target = await open_store(target_url, watch=False)
        try:
            await body(source, target)
        finally:
            await target.close()
    finally:
        await source.close()


async def move_counter(source: Store, target: Store, path: str, rules: Rules, out: dict[str, Any]) -> None:
    """Carry the counter at ``path`` (``counters.carry``); what it did goes in ``out``."""
    add_carries(out, await counters.carry(source, target, path, rules))


def add_carries(out: dict[str, Any], carries: dict[str, counters.CounterCarry]) -> None:
    """Count ``carries`` in a task's result (``out["counters"]``: path -> ``CounterCarry`` dict)."""
    for path, carry in carries.items():
        had = out["counters"].get(path)
        merged = carry if had is None else counters.merge(counters.CounterCarry(**had), carry)
        out["counters"][path] = merged.to_dict()
        out["write_ops"] += carry.writes


def _new_copy_result() -> dict[str, Any]:
    return {
        "nodes": 0, "bytes": 0, "written": 0, "unchanged": 0, "ephemerals": 0, "vanished": 0,
        "write_ops": 0, "conflicts": [], "counters": {}, "error": None, "listed": 0,
    }  # fmt: skip


class Copier:
    """The copy of a stream of source pages into ``target`` (module doc); counts in ``out``."""

    def __init__(
        self, source: Store, target: Store, rules: Rules, out: dict[str, Any], defer_counters: bool = False
    ) -> None:
        self.source, self.target, self.rules, self.out = source, target, rules, out
        self.defer_counters = defer_counters
        """Leave the counters to the caller (``out["deferred_counters"]``) instead of moving them."""
        self.pending: list[Restore] = []
        self.pending_writes = 0
        self.pending_bytes = 0
        self.pending_depth = 0
        self.conflicted: set[str] = set()
        self.counter_jobs: list[asyncio.Task[None]] = []
        self.counters_seen: set[str] = set()
        """Counters carried (or deferred) by this copier: a ledger-id generator by its root."""
        self.writing: asyncio.Task[None] | None = None
        """The restores sent last, still running while the next pages are read (targets that do
        not need parents first)."""
        self.known: dict[str, NodeRead] | None = None
        """The target's nodes, when read ahead for the whole partition (one range scan on etcd)."""

    async def page(self, nodes: list[NodeRead]) -> None:
        out, rules = self.out, self.rules
        out["listed"] += len(nodes)
        keep: list[NodeRead] = []
        for node in nodes:
            if rules.is_excluded(node.path):
                continue
            if node.ephemeral:
                out["ephemerals"] += 1
            elif not self.conflicted or not any(a in self.conflicted for a in paths.ancestors(node.path)):
                keep.append(node)  # (never below a conflict: it could not be brought over)
        if not keep:
            return
        if self.known is not None:
            targets: list[NodeRead | None] = [self.known.pop(n.path, None) for n in keep]
        else:
            targets = await self.target.read_many([n.path for n in keep])
        for node, tgt in zip(keep, targets, strict=True):
            out["nodes"] += 1
            out["bytes"] += len(node.value)
            counter = rules.is_counter(node.path)
            keeps = rules.keeps_version(node.path)
            j = judge(Side(node.value, node.version), _side(tgt), counter=counter, keep_version=keeps)
            if j.verdict is Verdict.EQUAL:
                out["unchanged"] += 1
                if counter:
                    self._move_counter(node.path)
            elif j.verdict is Verdict.CONFLICT:
                out["conflicts"].append((node.path, j.detail))
                self.conflicted.add(node.path)
            else:
                depth = node.path.count(paths.SEPARATOR)
                if self.pending and self.target.needs_parents and depth > self.pending_depth:
                    await self.flush()
                current = -1 if tgt is None else tgt.version
                version = restore_version(node.version, None if tgt is None else tgt.version, keeps)
                self.pending.append(Restore(node.path, node.value, version, current))
                self.pending_depth = depth
                self.pending_writes += version - current
                self.pending_bytes += len(node.value) + len(node.path)
                if self.pending_writes >= MAX_PENDING_WRITES or self.pending_bytes >= MAX_PENDING_BYTES:
                    await self.flush(wait=False)

    async def flush(self, *, wait: bool = True) -> None:
        """Send the pending restores; ``wait=False``: let them run while the next pages are read
        (at most one such batch at a time)."""
        if self.writing is not None:
            writing, self.writing = self.writing, None
            await writing
        restores, self.pending = self.pending, []
        self.pending_writes = self.pending_bytes = 0
        if not restores:
            return
        if wait or self.target.needs_parents:
            await self._restore(restores)
        else:
            self.writing = asyncio.ensure_future(self._restore(restores))

    async def _restore(self, restores: list[Restore]) -> None:
        out = self.out
        for restore, res in zip(restores, await self.target.restore_many(restores), strict=True):
            if isinstance(res, BadVersion):
                out["conflicts"].append((restore.path, f"the target's node changed during the copy ({res})"))
                self.conflicted.add(restore.path)
            elif isinstance(res, MetadataStoreError):
                raise res
            else:
                out["written"] += 1
                out["write_ops"] += res
                if self.rules.is_counter(restore.path):
                    self._move_counter(restore.path)

    def _move_counter(self, path: str) -> None:
        # each counter node once (a generator carried exactly is carried node by node, each once
        # it is in place; a jump carries the whole generator at its first node, none at the others)
        if path in self.counters_seen:
            return
        self.counters_seen.add(path)
        if self.defer_counters:
            self.out.setdefault("deferred_counters", []).append(path)
        else:
            job = move_counter(self.source, self.target, path, self.rules, self.out)
            self.counter_jobs.append(asyncio.ensure_future(job))

    async def finish(self) -> None:
        try:
            await self.flush()
        finally:
            if self.writing is not None:  # an error stopped the copy: let the batch end first
                await asyncio.gather(self.writing, return_exceptions=True)
            jobs, self.counter_jobs = self.counter_jobs, []
            results = await asyncio.gather(*jobs, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r


async def copy_pages(
    source: Store,
    target: Store,
    pages: AsyncIterator[list[NodeRead]],
    rules: Rules,
    out: dict[str, Any],
    defer_counters: bool = False,
    known: dict[str, NodeRead] | None = None,
) -> None:
    """Copy every page of ``pages`` (read from ``source``) into ``target``; ``known``: the
    target's nodes, read ahead."""
    copier = Copier(source, target, rules, out, defer_counters)
    copier.known = known
    try:
        async for page in pages:
            await copier.page(page)
    finally:
        await copier.finish()


async def read_levels(store: Store, levels: list[list[str]]) -> AsyncIterator[list[NodeRead]]:
    """The nodes of ``levels`` (lists of paths, shallowest first) as pages, without descending."""
    for level in levels:
        page = [n for n in await store.read_many(level) if n is not None]
        if page:
            yield page


# ---- running a task -------------------------------------------------------------------------------


def _with_retries(attempt: Callable[[], dict]) -> dict:
    """Run ``attempt`` again while it fails with ``StoreUnavailable`` (not ``StoreFull``), up to
    ``RETRIES`` times; the writes of failed attempts are kept in the count."""
    result = attempt()
    writes = 0
    for n in range(RETRIES):
        error = result["error"]
        if error is None or error["type"] != "StoreUnavailable":
            break
        writes += result.get("write_ops", 0)
        time.sleep(2 ** (n + 1))
        result = attempt()
        result["retries"] = n + 1
    if "write_ops" in result:
        result["write_ops"] += writes
    return result


def _partition(
    work: Callable[[list[str], str, str, Rules], Coroutine[Any, Any, dict]],
    roots: list[str], source_url: str, target_url: str, rules: Rules, progress: Any,
) -> dict:
    """Run ``work`` on one partition with retries; ``progress`` is an optional pair of Spark
    accumulators (nodes, bytes)."""
    result = _with_retries(lambda: run_loop(work(roots, source_url, target_url, rules)))
    if progress is not None:
        progress[0].add(result["nodes"])
        progress[1].add(result["bytes"])
    return result


# ---- the copy -------------------------------------------------------------------------------------


def copy_partition(roots: list[str], source_url: str, target_url: str, rules: Rules, progress: Any = None) -> dict:
    """Copy the subtrees of one partition (executor side): listed, read and written here."""
    return _partition(_copy, roots, source_url, target_url, rules, progress)


async def _copy(roots: list[str], source_url: str, target_url: str, rules: Rules) -> dict:
    out = _new_copy_result()

    async def body(source: Store, target: Store) -> None:
        known = None
        if not target.needs_parents:  # etcd: the target's side of the partition in one range scan
            known = {n.path: n async for page in target.read_trees(roots, prune=rules.excluded) for n in page}
        await copy_pages(source, target, source.read_trees(roots, prune=rules.excluded), rules, out, known=known)

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out


async def copy_top(source: Store, target: Store, levels: list[list[str]], rules: Rules) -> dict:
    """Copy the top of the tree (the driver's part), level by level, parents first. Its
    counters are left to the caller (``out["deferred_counters"]``), to move beside the job."""
    out = _new_copy_result()
    await copy_pages(source, target, read_levels(source, levels), rules, out, defer_counters=True)
    return out


async def move_counters(source_url: str, target_url: str, parents: list[str], rules: Rules) -> dict[str, Any]:
    """Carry the sequence counters of ``parents`` (the driver's, beside the Spark job)."""
    out = _new_copy_result()

    async def body(source: Store, target: Store) -> None:
        await asyncio.gather(*(move_counter(source, target, p, rules, out) for p in parents))

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out


# ---- the verification -----------------------------------------------------------------------------


def _new_verify_result() -> dict[str, Any]:
    return {"nodes": 0, "bytes": 0, "vanished": 0, "ephemerals": 0, "counters": 0, "mismatches": [], "error": None,
            "listed": 0, "counter_checks": {}}  # fmt: skip


def verify_partition(roots: list[str], source_url: str, target_url: str, rules: Rules, progress: Any = None) -> dict:
    """Verify the subtrees of one partition (executor side): both sides listed and read here."""
    return _partition(_verify, roots, source_url, target_url, rules, progress)


async def _verify(roots: list[str], source_url: str, target_url: str, rules: Rules) -> dict:
    out = _new_verify_result()

    async def body(source: Store, target: Store) -> None:
        await verify_pages(
            source, target, source.read_trees(roots, prune=rules.excluded),
            target.read_trees(roots, prune=rules.excluded), rules, out,
        )  # fmt: skip

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out


async def verify_pages(
    source: Store,
    target: Store,
    source_pages: AsyncIterator[list[NodeRead]],
    target_pages: AsyncIterator[list[NodeRead]],
    rules: Rules,
    out: dict[str, Any],
    parents_ok: set[str] | None = None,
) -> None:
    """Compare the nodes of both sides: every persistent source node judged against its target
    node (``rules.judge``, the copy's own), the counters, and the persistent target nodes the
    source does not have ("extra"), except the parents of source nodes that the target needs
    and the source does not (etcd keeps no parents; ZooKeeper must), the empty parents a
    ZooKeeper target made for ephemerals re-created in it (a migration's) or for the excluded
    subtrees (the floors of retired counters), the empty nodes a ledger-id generator's jump
    made, and ``parents_ok``."""
    src: dict[str, NodeRead] = {}
    seen: set[str] = set()
    ephemeral_ancestors: set[str] = set()
    async for page in source_pages:
        out["listed"] += len(page)
        for node in page:
            if rules.is_excluded(node.path):
                continue
            seen.add(node.path)
            if node.ephemeral:
                out["ephemerals"] += 1
                ephemeral_ancestors.update(paths.ancestors(node.path))
            else:
                src[node.path] = node
    tgt: dict[str, NodeRead] = {}
    async for page in target_pages:
        for node in page:
            if not rules.is_excluded(node.path):
                tgt[node.path] = node
    checked: set[str] = set()
    for path, node in src.items():
        out["nodes"] += 1
        out["bytes"] += len(node.value)
        counter = rules.is_counter(path)
        keep = rules.keeps_version(path)
        j: Judgement = judge(Side(node.value, node.version), _side(tgt.get(path)), counter=counter, keep_version=keep)
        if j.verdict is not Verdict.EQUAL:
            out["mismatches"].append((path, j.kind, j.detail))
        if counter:
            out["counters"] += 1
            if path not in checked:  # (a generator's checks come again at each of its nodes: the same)
                checked.add(path)
                for at, state in (await counters.check(source, target, path, rules)).items():
                    out["counter_checks"][at] = state.to_dict()
                    if not state.ok:
                        out["mismatches"].append(counters.mismatch(at, state))
    source_paths = sorted(src)
    for path, node in tgt.items():
        if path in src or node.ephemeral or (parents_ok is not None and path in parents_ok and path not in seen):
            continue
        below = path + paths.SEPARATOR
        i = bisect.bisect_left(source_paths, below)
        if i < len(source_paths) and source_paths[i].startswith(below):
            continue
        if not node.value and node.version == 0 and (path in ephemeral_ancestors or rules.is_excluded_ancestor(path)):
            continue
        if not node.value and rules.ledger_root_of(path) is not None and path not in seen:
            continue  # made by the ledger-id generator's jump (a HOB- node and its parent)
        out["mismatches"].append(
            (path, "extra", f"only in the target (version {node.version}, {len(node.value)} bytes)")
        )


async def verify_top(
    source: Store, target: Store, levels: list[list[str]], source_children: dict[str, list[str]], rules: Rules
) -> dict:
    """Verify the top of the tree (the driver's part): its nodes, and every target node below it
    that the source has no name for (listed whole: each is an extra)."""
    out = _new_verify_result()
    top = [paths.SEPARATOR] + [p for level in levels for p in level]
    named = {c for kids in source_children.values() for c in kids} | set(top)
    target_kids = await _children(target, top, rules)
    extra_roots = sorted(c for p in top for c in target_kids[p] if c not in named)

    async def target_pages() -> AsyncIterator[list[NodeRead]]:
        async for page in read_levels(target, levels):
            yield page
        if extra_roots:
            async for page in target.read_trees(extra_roots, prune=rules.excluded):
                yield page

    # a top path the target has and the source only names (an etcd parent with no key) is a parent
    await verify_pages(source, target, read_levels(source, levels), target_pages(), rules, out, parents_ok=named)
    return out


async def _children(store: Store, level: list[str], rules: Rules) -> dict[str, list[str]]:
    from .plan import children_of

    return await children_of(store, level, rules)
