"""``TreeReads``: the copy's reads of whole subtrees: ``walk`` lists them by pipelined
``getChildren2`` (children and Stat in one answer: nothing else is read), ``read_trees`` and
``read_many`` read their values too, by ``BulkReads``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiozk import protocol

from .. import errors, paths
from ..bulk import NodeInfo, NodeRead
from .bulk_reads import BulkReads
from .calls import Calls
from .wire.constants import Op

#: getChildren2 calls in flight and per page of ``walk``.
_WALK_IN_FLIGHT = 512
_WALK_PAGE = 2000
#: Nodes per page of ``read_trees`` and ``read_many`` (their reads are sent together).
_READ_PAGE = 2000


def _node(path: str, response: Any) -> NodeRead:
    stat = response.stat
    return NodeRead(path, response.data or b"", stat.version, stat.ephemeral_owner != 0)


class TreeReads:
    """Lists and reads whole subtrees, level by level, many requests in flight."""

    def __init__(self, calls: Calls, reads: BulkReads) -> None:
        self._calls = calls
        self._reads = reads

    async def read_many(self, items: Sequence[str]) -> list[NodeRead | None]:
        """The nodes at ``items`` (``None`` where missing), read together, a page at a time."""
        out: list[NodeRead | None] = []
        for start in range(0, len(items), _READ_PAGE):
            chunk = items[start : start + _READ_PAGE]
            for path, r in zip(chunk, await self._reads.reads([(Op.GET_DATA, p) for p in chunk]), strict=True):
                out.append(None if r is None else _node(path, r))
        return out

    async def read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        """Level by level: the getData of every node of the level (its Stat says how many
        children it has), then the getChildren of the nodes that have some; the next page is
        read while the caller works on this one."""

        async def read(chunk: list[str]) -> tuple[list[NodeRead], list[str]]:
            got = await self._reads.reads([(Op.GET_DATA, p) for p in chunk])
            page: list[NodeRead] = []
            parents: list[str] = []
            for path, r in zip(chunk, got, strict=True):
                if r is None:
                    continue
                if path != paths.SEPARATOR:
                    page.append(_node(path, r))
                if r.stat.num_children:
                    parents.append(path)
            kids = await self._reads.reads([(Op.GET_CHILDREN, p) for p in parents])
            below: list[str] = []
            for path, k in zip(parents, kids, strict=True):
                if k is not None:
                    below.extend(c for c in (paths.join(path, name) for name in sorted(k.children)) if c not in prune)
            return page, below

        frontier = [r for r in roots if r not in prune]
        while frontier:
            chunks = [frontier[i : i + _READ_PAGE] for i in range(0, len(frontier), _READ_PAGE)]
            next_frontier: list[str] = []
            ahead = asyncio.ensure_future(read(chunks[0]))
            try:
                for k in range(len(chunks)):
                    page, below = await ahead
                    if k + 1 < len(chunks):
                        ahead = asyncio.ensure_future(read(chunks[k + 1]))
                    next_frontier.extend(below)
                    if page:
                        yield page
            finally:
                if not ahead.done():
                    ahead.cancel()
            frontier = next_frontier

    async def walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        """Breadth first with pipelined ``getChildren2``: one call per node gives both its
        children and its own Stat (version, data length, ephemeral owner), so nothing is read."""
        sem = asyncio.Semaphore(_WALK_IN_FLIGHT)
        calls = self._calls

        async def children2(path: str) -> Any:
            async with sem:
                request = protocol.GetChildren2Request(path=calls.namespace.full(path), watch=False)
                try:
                    return await calls.call(request, path)
                except errors.NotFound:
                    return None

        frontier = [root]
        while frontier:
            next_frontier: list[str] = []
            for start in range(0, len(frontier), _WALK_PAGE):
                chunk = frontier[start : start + _WALK_PAGE]
                page: list[NodeInfo] = []
                for path, resp in zip(chunk, await asyncio.gather(*(children2(p) for p in chunk)), strict=True):
                    if resp is None:
                        continue
                    if path != root:
                        stat = resp.stat
                        owner = stat.ephemeral_owner
                        page.append(NodeInfo(path, stat.version, stat.data_length, owner != 0, owner,
                                             stat.mzxid))
                    for name in resp.children:
                        child = paths.join(path, name)
                        if child not in prune:
                            next_frontier.append(child)
                if page:
                    yield page
            frontier = next_frontier
