"""The copy of a stream of source pages into a target, in a Spark task or the driver.

The source's subtrees come page by page (breadth first, ``Store.read_trees``), each page's target
side is read (``Store.read_many``) and judged (``rules.judge``), and the restores are packed across
pages (``Store.restore_many`` of up to ``MAX_PENDING_WRITES`` writes: one etcd txn carries 128
distinct keys whatever the chunk they came from). A target that needs parents first (ZooKeeper)
gets the pending restores before any node of a deeper level. A sequence counter is carried
(``counters.carry``) as soon as its node is in place, while the copy goes on; a ledger-id generator
once per task, whichever of its nodes comes first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from metashift.copy import counters
from metashift.copy.rules import Rules, Side, Verdict, judge, restore_version
from metashift.stores import (
    BadVersion,
    MetadataStoreError,
    NodeRead,
    Restore,
    Store,
    paths,
)

#: Restores held before they are sent: writes, bytes.
MAX_PENDING_WRITES = 50_000
MAX_PENDING_BYTES = 32 * 1024 * 1024


def side_of(node: NodeRead | None) -> Side | None:
    """The judged side of ``node`` (None: absent)."""
    return None if node is None else Side(node.value, node.version, node.ephemeral)


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


def new_copy_result() -> dict[str, Any]:
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
            j = judge(Side(node.value, node.version), side_of(tgt), counter=counter, keep_version=keeps)
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
