"""The Oxia store's bulk operations (the copy, its verification, sample data): walks by range scans
a level at a time, restores in one write per node by Oxia's version overrides, sequence counters
moved in one write by the modifications-count override.

- A walk scans, level by level, the range of each depth below the root on every shard (Oxia's
  hierarchical key order puts the keys of one depth below a prefix in one range: ``keys``), down
  to the deepest key of the namespace (each shard's ``FLOOR`` of a very deep key), so a node whose
  parent is missing (the child of an ephemeral that went) is still found.
- ``restore_many`` writes each node once with ``override_version_id`` = ``override_modifications_count``
  = the version: what Pulsar reads natively (``version_id``) and what this store calls the version
  (``modifications_count``) are both the source's version; conditional on the node being absent,
  or on the ``version_id`` read with the expected count.
- The sequence counter of a parent is its ``modifications_count`` (a sequential put names its child
  after the parent's count once it put the parent): ``advance_sequence_counter`` rewrites the
  parent with its own value, ``override_modifications_count`` and its ``version_id`` kept, so a
  broker reading Oxia natively still sees the parent's version it knew. On this store the
  parent's version is its counter, as on etcd.
- ``position_of`` is the record's modification time in milliseconds (Oxia keeps no global revision):
  it orders writes to the server clock's millisecond.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from metashift.stores.oxia.proto import client_pb2 as pb

from .. import paths
from ..bulk import BulkStore, NodeInfo, NodeRead, Restore
from ..errors import BadVersion, MetadataStoreError
from .keys import DEEPEST_KEY, depth, level_range, sort_key
from .operations import OxiaOperations

#: Nodes per page of a walk.
WALK_PAGE = 10_000


def _pruned(path: str, prune: set[str]) -> bool:
    return any(paths.is_under(path, root) for root in prune)


class OxiaBulk(OxiaOperations, BulkStore):
    """The ``BulkStore`` operations of the Oxia store."""

    # A put makes its missing parents: a copy restores parents first, so that each is restored
    # with its own version instead of found made (empty, version 0) by its child's put.
    needs_parents = True
    # a counter is the parent's modifications count, set by one write (``advance_sequence_counter``)
    sequence_counter_in_one_write = True

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

    async def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        async for level in self._levels(root):
            page = []
            for path, record in level:
                if prune and _pruned(path, prune):
                    continue
                stat = self._stat(path, record.version)
                page.append(NodeInfo(path, stat.version, len(record.value), stat.ephemeral, stat.owner,
                                     stat.modification_timestamp))
            for i in range(0, len(page), WALK_PAGE):
                yield page[i : i + WALK_PAGE]

    async def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        found: list[NodeRead] = []
        for root in roots:
            if root != paths.SEPARATOR and not (prune and _pruned(root, prune)):
                got = await self.get(root)
                if got is not None:
                    found.append(NodeRead(root, got[0], got[1].version, got[1].ephemeral))
            if prune and _pruned(root, prune):
                continue
            async for level in self._levels(root):
                for path, record in level:
                    if not (prune and _pruned(path, prune)):
                        stat = self._stat(path, record.version)
                        found.append(NodeRead(path, bytes(record.value), stat.version, stat.ephemeral))
        found.sort(key=lambda n: (n.path.count(paths.SEPARATOR), n.path))
        for i in range(0, len(found), WALK_PAGE):
            yield found[i : i + WALK_PAGE]

    async def _restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        async def restore(item: Restore) -> int | MetadataStoreError:
            if item.current >= item.version:
                return 0
            try:
                expected = -1
                if item.current != -1:
                    current = await self._record(item.path, value=False)
                    if current is None or current.version.modifications_count != item.current:
                        raise BadVersion(item.path, "its version moved before it was restored")
                    expected = current.version.version_id
                await self._put_record(item.path, item.value, expected, False, override_version_id=item.version,
                                       override_modifications_count=item.version)
            except BadVersion:
                return BadVersion(item.path, "its version moved while it was restored")
            except MetadataStoreError as e:
                return e
            return 1

        return list(await asyncio.gather(*(restore(item) for item in items)))

    async def position_of(self, path: str) -> int | None:
        """The record's modification time in ms (by the shard leader's clock)."""
        record = await self._record(paths.validate(path), value=False)
        return None if record is None else int(record.version.modified_timestamp)

    async def children_version(self, path: str) -> int | None:
        """The suffix of the next sequential child of ``path``: its ``modifications_count`` + 1
        (the put on the parent that a sequential put makes counts one more); ``None`` when ``path``
        does not exist (its first sequential child is then ``0000000000``)."""
        record = await self._record(paths.validate(path), value=False)
        return None if record is None else int(record.version.modifications_count) + 1

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """One write: the parent with its own value (created empty when missing), its count set to
        ``at_least - 1`` and its ``version_id`` kept; again if it moved in between."""
        paths.validate(parent)
        for _ in range(50):
            counter = await self.sequence_counter(parent)
            if counter >= at_least:
                return 0
            record = await self._record(parent)
            try:
                if record is None:
                    await self._make_parents(parent)
                    await self._put_record(parent, b"", -1, False, override_modifications_count=at_least - 1)
                else:
                    version = record.version
                    await self._put_record(
                        parent, bytes(record.value), version.version_id, version.HasField("session_id"),
                        override_version_id=version.version_id, override_modifications_count=at_least - 1)
            except BadVersion:  # (AlreadyExists too) it moved under us: read it again
                continue
            return 1
        raise BadVersion(parent, "the sequence counter kept moving")
