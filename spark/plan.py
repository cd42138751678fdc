"""How the copy and the verification split a tree between the driver and the executors.

The driver never lists the whole source. It lists the top of the tree, level by level
(``getChildren`` of each node of a level), until a level holds at least ``min_roots`` nodes:

- the levels above it (``Split.top``: a few hundred nodes at most on a Pulsar tree) are copied
  and verified by the driver itself, parents first;
- the nodes of that level (``Split.roots``, sorted) are the roots of subtrees that the executors
  list and read themselves (``Store.read_trees``), cut into partitions of consecutive roots.

Every parent of a root is in ``top``, so once the driver has copied ``top`` the executors may
create any node of their subtrees, in any partition, in one Spark job: no barrier per depth.
The driver holds the names of ``top`` and of the roots only, so its memory does not grow with
the tree (a flat parent of a million children is the exception: its names are the roots).
Excluded subtrees are pruned here and in the executors.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from metashift.copy.rules import Rules
from metashift.stores import Store, paths

#: Roots per partition at most; partitions per core at least (when there are roots enough).
MAX_ROOTS_PER_PARTITION = 2000
PARTITIONS_PER_CORE = 8
#: The levels below the top are split once a level holds this many nodes per core (and at
#: least ``MIN_ROOTS``), or at ``MAX_DEPTH``.
ROOTS_PER_CORE = 32
MIN_ROOTS = 64
MAX_DEPTH = 6
_LISTING_IN_FLIGHT = 256


@dataclass
class Split:
    top: list[list[str]] = field(default_factory=list)
    """The levels the driver handles, shallowest first (depth 1, 2, ...), each sorted."""
    roots: list[str] = field(default_factory=list)
    """Sorted roots of the subtrees the executors handle (all one level below ``top``)."""
    children: dict[str, list[str]] = field(default_factory=dict)
    """The children each ``top`` node (and the root) has in the store listed, excluded ones left out."""
    listing_seconds: float = 0.0
    deferred_counters: list[str] = field(default_factory=list)
    """Counters of the top that the copy moves beside its Spark job."""

    @property
    def top_nodes(self) -> int:
        return sum(len(level) for level in self.top)

    def partitions(self, parallelism: int) -> list[list[str]]:
        """``roots`` cut into runs of consecutive roots (an etcd executor reads each run with one
        range scan), enough of them for Spark to balance subtrees of unknown sizes."""
        if not self.roots:
            return []
        want = max(PARTITIONS_PER_CORE * max(parallelism, 1), math.ceil(len(self.roots) / MAX_ROOTS_PER_PARTITION))
        count = min(len(self.roots), want)
        size = math.ceil(len(self.roots) / count)
        return [self.roots[i : i + size] for i in range(0, len(self.roots), size)]


def min_roots(parallelism: int) -> int:
    return max(MIN_ROOTS, ROOTS_PER_CORE * max(parallelism, 1))


async def children_of(store: Store, level: list[str], rules: Rules) -> dict[str, list[str]]:
    """The children of every path of ``level`` in ``store`` (excluded ones left out), sorted."""
    sem = asyncio.Semaphore(_LISTING_IN_FLIGHT)

    async def one(path: str) -> list[str]:
        async with sem:
            names = await store.get_children(path)
        return sorted(c for c in (paths.join(path, n) for n in names) if not rules.is_excluded(c))

    got = await asyncio.gather(*(one(p) for p in level))
    return dict(zip(level, got, strict=True))


async def split_tree(store: Store, rules: Rules, at_least: int, max_depth: int = MAX_DEPTH) -> Split:
    """List the top of ``store`` (module doc) until a level holds ``at_least`` nodes."""
    started = time.monotonic()
    split = Split()
    level = [paths.SEPARATOR]
    depth = 0
    while True:
        kids = await children_of(store, level, rules)
        split.children.update(kids)
        below = sorted(c for p in level for c in kids[p])
        depth += 1
        if not below:
            break
        if len(below) >= at_least or depth >= max_depth:
            split.roots = below
            break
        split.top.append(below)
        level = below
    split.listing_seconds = time.monotonic() - started
    return split
