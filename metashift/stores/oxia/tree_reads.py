"""``TreeReads``: the copy's reads of whole subtrees on Oxia: range scans a level at a time.

A walk scans, level by level, the range of each depth below the root on every shard (Oxia's
hierarchical key order puts the keys of one depth below a prefix in one range: ``keys``), down
to the deepest key of the namespace (each shard's ``FLOOR`` of a very deep key), so a node whose
parent is missing (the child of an ephemeral that went) is still found.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from metashift.stores.oxia.proto import client_pb2 as pb

from .. import paths
from ..bulk import NodeInfo, NodeRead
from .connection import OxiaConnection
from .keys import DEEPEST_KEY, Keys, depth, level_range, sort_key
from .operations import Operations
from .records import Records

#: Nodes per page of a walk.
WALK_PAGE = 10_000


def pruned(path: str, prune: set[str]) -> bool:
    """Whether ``path`` is in, or under, one of the subtrees of ``prune``."""
    return any(paths.is_under(path, root) for root in prune)


class TreeReads:
    """Lists (``walk``) and reads (``read_trees``) subtrees, level by level, on every shard."""

    def __init__(self, conn: OxiaConnection, keys: Keys, records: Records, operations: Operations) -> None:
        self._conn = conn
        self._keys = keys
        self._records = records
        self._operations = operations

    async def _scan(self, start: str, end: str) -> list[Any]:
        """The records (``GetResponse`` with their key) in ``[start, end)`` of every shard, in
        Oxia's key order."""
        conn = self._conn
        answers = await asyncio.gather(*(conn.streamed(
            None, "RangeScan", s, pb.RangeScanRequest(shard=s.id, start_inclusive=start, end_exclusive=end))
            for s in conn.shards))
        records = [r for shard_answers in answers for answer in shard_answers for r in answer.records]
        records.sort(key=lambda r: sort_key(r.key))
        return records

    async def _deepest(self) -> int:
        """The depth of the deepest key of the namespace."""
        conn = self._conn
        request = pb.GetRequest(key=DEEPEST_KEY, include_value=False, comparison_type=pb.FLOOR)
        answers = await asyncio.gather(*(conn.streamed(None, "Read", s, pb.ReadRequest(shard=s.id, gets=[request]))
                                         for s in conn.shards))
        found = [g.key for shard_answers in answers for answer in shard_answers for g in answer.gets
                 if g.status == pb.OK]
        return max((depth(k) for k in found), default=0)

    async def _levels(self, root: str) -> AsyncIterator[list[tuple[str, Any]]]:
        """The records below ``root``, a level at a time: (path, record) in key order."""
        prefix = self._keys.children_prefix(root)
        levels = await self._deepest() - depth(prefix)
        for below in range(levels + 1):
            level = []
            for record in await self._scan(*level_range(prefix, below)):
                path = self._keys.path_of(record.key)
                if path is not None and path != paths.SEPARATOR:
                    level.append((path, record))
            yield level

    async def walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        async for level in self._levels(root):
            page = []
            for path, record in level:
                if prune and pruned(path, prune):
                    continue
                stat = self._records.stat(path, record.version)
                page.append(NodeInfo(path, stat.version, len(record.value), stat.ephemeral, stat.owner,
                                     stat.modification_timestamp))
            for i in range(0, len(page), WALK_PAGE):
                yield page[i : i + WALK_PAGE]

    async def read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        found: list[NodeRead] = []
        for root in roots:
            if root != paths.SEPARATOR and not (prune and pruned(root, prune)):
                got = await self._operations.get(root)
                if got is not None:
                    found.append(NodeRead(root, got[0], got[1].version, got[1].ephemeral))
            if prune and pruned(root, prune):
                continue
            async for level in self._levels(root):
                for path, record in level:
                    if not (prune and pruned(path, prune)):
                        stat = self._records.stat(path, record.version)
                        found.append(NodeRead(path, bytes(record.value), stat.version, stat.ephemeral))
        found.sort(key=lambda n: (n.path.count(paths.SEPARATOR), n.path))
        for i in range(0, len(found), WALK_PAGE):
            yield found[i : i + WALK_PAGE]
