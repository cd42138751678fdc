"""After FAILED: remove from the target everything the copy (and the agents' freeze) put there,
so that a new start begins on an empty target. The target was empty when the migration started
(``start`` checks it), so everything in it is the migration's."""

from __future__ import annotations

import logging

from metashift.stores import DeleteOp, MetadataStore, MetadataStoreError, NotFound

log = logging.getLogger(__name__)

#: ZooKeeper's own subtree, present in every ZooKeeper target.
RESERVED = ("zookeeper",)
_BATCH = 500


async def target_paths(target: MetadataStore) -> list[str]:
    """Every path in the target, parents before children (``/zookeeper`` left out)."""
    found: list[str] = []
    frontier = ["/"]
    while frontier:
        parent = frontier.pop()
        for name in await target.get_children(parent):
            if parent == "/" and name in RESERVED:
                continue
            path = f"{parent.rstrip('/')}/{name}"
            found.append(path)
            frontier.append(path)
    return found


async def first_path(target: MetadataStore) -> str | None:
    """A path the target holds (``/zookeeper`` aside), or ``None`` when it is empty."""
    for name in await target.get_children("/"):
        if name not in RESERVED:
            return f"/{name}"
    return None


async def empty_target(target: MetadataStore) -> int:
    """Delete every node of the target, children first. Returns how many were deleted."""
    by_depth: dict[int, list[str]] = {}
    for path in await target_paths(target):
        by_depth.setdefault(path.count("/"), []).append(path)
    deleted = 0
    for depth in sorted(by_depth, reverse=True):  # a batch runs in no order: one depth at a time
        level = by_depth[depth]
        for start in range(0, len(level), _BATCH):
            chunk = level[start : start + _BATCH]
            for result in await target.batch([DeleteOp(p) for p in chunk]):
                if isinstance(result, NotFound):
                    continue
                if isinstance(result, MetadataStoreError):
                    raise result
                deleted += 1
    log.info("removed %d node(s) from the target %s", deleted, target.url)
    return deleted
