"""Emptying a target: after FAILED (remove everything the copy and the agents' freeze put there,
so that a new start begins on an empty target), and for ``migrate start --clean-target`` (a store
the cluster left, to be the target of the way back).

One node stays: a migration flag the target holds. In a store the cluster left it is COMPLETED
and names where the cluster went; an agent restarted with that store as its configured source
follows it there. Removing it would send such an agent to serve from a half-made copy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from metashift.migration import paths as migration_paths
from metashift.stores import DeleteOp, MetadataStore, MetadataStoreError, NotFound

log = logging.getLogger(__name__)

#: ZooKeeper's own subtree, present in every ZooKeeper target.
RESERVED = ("zookeeper",)
#: Kept by every emptying (module doc).
def kept() -> tuple[str, ...]:
    """The flag (at its place, and where an older metashift wrote it)."""
    return (migration_paths.FLAG, migration_paths.LEGACY_FLAG)
_BATCH = 500


def _kept_or_above(path: str) -> bool:
    return any(k == path or k.startswith(path + "/") for k in kept())


async def _children(target: MetadataStore, parent: str) -> list[str]:
    """The paths of ``parent``'s children (``/zookeeper`` left out)."""
    names = await target.get_children(parent)
    return [f"{parent.rstrip('/')}/{n}" for n in names if not (parent == "/" and n in RESERVED)]


async def target_paths(target: MetadataStore) -> list[str]:
    """Every path in the target, parents before children (``/zookeeper`` left out)."""
    found: list[str] = []
    frontier = ["/"]
    while frontier:
        children = await _children(target, frontier.pop())
        found.extend(children)
        frontier.extend(children)
    return found


async def first_path(target: MetadataStore) -> str | None:
    """A path the target holds, or ``None`` when it is empty: ``/zookeeper`` aside, and a kept flag
    with its empty parents aside."""
    frontier = ["/"]
    while frontier:
        for path in await _children(target, frontier.pop()):
            if path in kept():
                continue
            if not _kept_or_above(path):
                return path
            got = await target.get(path)
            if got is not None and got[0]:
                return path  # a parent of the kept flag that holds a value of its own
            frontier.append(path)
    return None


async def empty_target(target: MetadataStore, fence: Callable[[], None] | None = None) -> int:
    """Delete every node of the target but the kept ones (and their parents), children first.
    Returns how many were deleted. ``fence()`` runs before every batch and raises when the caller
    may no longer write there (a coordinator whose leader lease ran out: a new migration may be
    copying into that target by the time a paused one resumes)."""
    found = await target_paths(target)
    kept_here = [p for p in found if p in kept()]
    by_depth: dict[int, list[str]] = {}
    for path in found:
        if not any(k == path or k.startswith(path + "/") for k in kept_here):
            by_depth.setdefault(path.count("/"), []).append(path)
    deleted = 0
    for depth in sorted(by_depth, reverse=True):  # a batch runs in no order: one depth at a time
        level = by_depth[depth]
        for start in range(0, len(level), _BATCH):
            chunk = level[start : start + _BATCH]
            if fence is not None:
                fence()
            for result in await target.batch([DeleteOp(p) for p in chunk]):
                if isinstance(result, NotFound):
                    continue
                if isinstance(result, MetadataStoreError):
                    raise result
                deleted += 1
    log.info("removed %d node(s) from the target %s", deleted, target.url)
    return deleted


async def top_level(target: MetadataStore) -> list[str]:
    """The target's top-level nodes, for a confirmation (``/zookeeper`` aside)."""
    return [f"/{n}" for n in await target.get_children("/") if n not in RESERVED]
