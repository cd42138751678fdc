"""exists, getData, getChildren(2), getAllChildrenNumber, getEphemerals, sync: reads of the
router's active store (``Nodes``), with the watches they set."""

from __future__ import annotations

import asyncio

from metashift.agent.zookeeper.handlers.base import Body, ZkError, check_path
from metashift.agent.zookeeper.handlers.nodes import Node, Nodes
from metashift.agent.zookeeper.session import ZkSession
from metashift.agent.zookeeper.watches import CHILD, DATA, EXIST, Watches
from metashift.stores import paths
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import Err, Writer, ZStat


class Reads:
    """The requests that read nodes, one method per opcode."""

    def __init__(self, nodes: Nodes, watches: Watches) -> None:
        self.nodes = nodes
        self.watches = watches

    async def exists(self, session: ZkSession, req: wire.PathWatchRequest) -> Body:
        """exists (opcode 3): the Stat; a watch: data if the node is there, exist if not."""
        node = await self._watched_node(req)
        if req.watch:
            self.watches.add(DATA if node is not None else EXIST, req.path, session)
        if node is None:
            raise ZkError(Err.NONODE)
        return Writer().stat(node[1]).bytes()

    async def get_data(self, session: ZkSession, req: wire.PathWatchRequest) -> Body:
        """getData (4): value and Stat; a watch: data."""
        node = await self._watched_node(req)
        if node is None:
            raise ZkError(Err.NONODE)
        if req.watch:
            self.watches.add(DATA, req.path, session)
        return Writer().buffer(node[0]).stat(node[1]).bytes()

    async def get_children(self, session: ZkSession, req: wire.PathWatchRequest) -> Body:
        """getChildren (8): the names; a watch: child."""
        kids, _ = await self.children(session, req)
        return Writer().strings(kids).bytes()

    async def get_children2(self, session: ZkSession, req: wire.PathWatchRequest) -> Body:
        """getChildren2 (12): the names and the Stat; a watch: child."""
        kids, zstat = await self.children(session, req)
        return Writer().strings(kids).stat(zstat).bytes()

    async def get_all_children_number(self, session: ZkSession, req: wire.PathRequest) -> Body:
        """getAllChildrenNumber (104): every node below the path, counted level by level."""
        check_path(req.path)
        node = await self.nodes.node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        total = 0
        level = [paths.join(req.path, k) for k in node[2]]
        while level:
            total += len(level)
            listed = await asyncio.gather(*(self.nodes.children(p) for p in level))
            level = [paths.join(p, k) for p, kids in zip(level, listed, strict=True) for k in kids]
        return Writer().int(total).bytes()

    async def get_ephemerals(self, session: ZkSession, req: wire.PathRequest) -> Body:
        """getEphemerals (103): the session's ephemerals under the path."""
        prefix = req.path or paths.SEPARATOR
        found = sorted(p for p in session.client.ephemerals if prefix == paths.SEPARATOR or p.startswith(prefix))
        return Writer().strings(found).bytes()

    async def sync(self, session: ZkSession, req: wire.PathRequest) -> Body:
        """sync (9): nothing to wait for (every read is of the store itself); the path back."""
        check_path(req.path)
        return Writer().string(req.path).bytes()

    async def children(self, session: ZkSession, req: wire.PathWatchRequest) -> tuple[list[str], ZStat]:
        """getChildren's children and Stat (multiRead's too), with its child watch."""
        node = await self._watched_node(req)
        if node is None:
            raise ZkError(Err.NONODE)
        if req.watch:
            self.watches.add(CHILD, req.path, session)
        return node[2], node[1]

    async def _watched_node(self, req: wire.PathWatchRequest) -> Node | None:
        """The node a read asks for; with its watch flag, the front listens to the store before
        the read reaches it (no change after the answer is missed)."""
        check_path(req.path)
        if req.watch:
            self.watches.want()
        return await self.nodes.node(req.path)
