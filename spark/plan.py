"""Listing and partitioning, shared by the copy and the verification.

The driver lists the source once (``Store.walk``: breadth first, excluded subtrees
pruned), keeps every persistent node with its version and size, and reads the sequence counters.
The plan then cuts the nodes into stages and partitions:

- one stage per depth, shallowest first: when a stage runs, every parent of its nodes already
  exists in the target with its own value and version (ZooKeeper refuses a child without its
  parent, and a parent made empty on the fly could no longer get the source's version 0 value);
- within a stage, contiguous runs of the sorted paths, cut so that no partition holds more than
  ``MAX_NODES`` nodes or ``MAX_WORK`` writes (a node of version V costs V+1 writes), and so that
  there are at least two partitions per core when the stage is big enough.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metashift.stores import Store, paths

from .report import EmptySource
from .rules import Rules

#: One node of the plan: (path, version, size in bytes) as listed.
Item = tuple[str, int, int]

MAX_NODES = 5000
MAX_WORK = 20_000
MIN_NODES = 200


@dataclass
class Plan:
    nodes: list[Item]
    """Persistent nodes to copy, sorted by path."""
    ephemerals: int = 0
    ephemeral_ancestors: set[str] = field(default_factory=set)
    """Every ancestor of an ephemeral: a store that keeps parents (ZooKeeper) has them as empty
    nodes even where the other side (etcd) has none."""
    counters: dict[str, int] = field(default_factory=dict)
    """Counter parent -> the next sequential suffix the source would hand out."""
    listing_seconds: float = 0.0

    @property
    def total_bytes(self) -> int:
        return sum(size for _, _, size in self.nodes)

    def stages(self, parallelism: int) -> list[list[list[Item]]]:
        return stages(self.nodes, parallelism)


async def make_plan(
    store: Store, rules: Rules, on_progress: Callable[[int], None] | None = None
) -> Plan:
    """List ``store`` under ``rules``; ``on_progress`` gets the count of nodes listed so far."""
    start = time.monotonic()
    nodes: list[Item] = []
    ephemerals = 0
    ancestors: set[str] = set()
    seen = 0
    async for page in store.walk(paths.SEPARATOR, prune=rules.excluded):
        for node in page:
            if rules.is_excluded(node.path):
                continue
            if node.ephemeral:
                ephemerals += 1
                ancestors.update(paths.ancestors(node.path))
                continue
            nodes.append((node.path, node.version, node.size))
        seen += len(page)
        if on_progress is not None:
            on_progress(seen)
    nodes.sort()
    counters: dict[str, int] = {}
    for path, _, _ in nodes:
        if rules.is_counter(path):
            # The exact next suffix would keep the promise; the parent's children_version (on
            # ZooKeeper the cversion, which also counts deletions) is the larger and is the number
            # operators and the issue compare with, so the target's counter reaches that. The
            # ids skipped cost nothing.
            exact = await store.sequence_counter(path)
            counters[path] = max(exact, await store.children_version(path) or 0)
    return Plan(nodes, ephemerals, ancestors, counters, time.monotonic() - start)


async def make_source_plan(
    store: Store, url: str, rules: Rules, on_progress: Callable[[int], None] | None = None
) -> Plan:
    """``make_plan`` of a copy's or a verification's source; ``EmptySource`` when it holds no
    node at all: a mistyped chroot or prefix, which must not pass for a copy of nothing."""
    plan = await make_plan(store, rules, on_progress)
    if not plan.nodes and not plan.ephemerals:
        raise EmptySource(url)
    return plan


def stages(nodes: list[Item], parallelism: int) -> list[list[list[Item]]]:
    """Stages by depth (shallowest first), each cut into partitions (module doc)."""
    by_depth: dict[int, list[Item]] = {}
    for item in nodes:
        by_depth.setdefault(item[0].count(paths.SEPARATOR), []).append(item)
    out: list[list[list[Item]]] = []
    for depth in sorted(by_depth):
        items = sorted(by_depth[depth])
        work = sum(v + 1 for _, v, _ in items)
        want = max(1, min(2 * max(parallelism, 1), math.ceil(len(items) / MIN_NODES)))
        nodes_cap = min(MAX_NODES, max(1, math.ceil(len(items) / want)))
        work_cap = min(MAX_WORK, max(1, math.ceil(work / want)))
        parts: list[list[Item]] = [[]]
        part_work = 0
        for item in items:
            cost = item[1] + 1
            if parts[-1] and (len(parts[-1]) >= nodes_cap or part_work + cost > work_cap):
                parts.append([])
                part_work = 0
            parts[-1].append(item)
            part_work += cost
        out.append(parts)
    return out
