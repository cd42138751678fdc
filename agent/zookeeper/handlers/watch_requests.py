"""setWatches (a reconnecting client's), addWatch, removeWatches and checkWatches."""

from __future__ import annotations

from metashift.agent.zookeeper.handlers.base import Body, ZkError, check_path
from metashift.agent.zookeeper.handlers.nodes import Nodes
from metashift.agent.zookeeper.session import ZkSession
from metashift.agent.zookeeper.watches import CHILD, DATA, EXIST, PERSISTENT, RECURSIVE, Watches
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import AddWatchMode, Err, EventType, Writer


class WatchRequests:
    """The requests that set, remove and check watches, one method per opcode."""

    def __init__(self, watches: Watches, nodes: Nodes) -> None:
        self.watches = watches
        self.nodes = nodes

    async def set_watches(self, session: ZkSession, req: wire.SetWatchesRequest) -> Body:
        """Re-set a reconnecting client's watches. The session kept its watches on the agent and
        events that fired while it was away were delivered on re-attach; a watch whose condition
        already holds fires now (exist: the node is there; data, child: the node is gone)."""
        groups = ((DATA, req.data), (EXIST, req.exist), (CHILD, req.child),
                  (PERSISTENT, req.persistent), (RECURSIVE, req.persistent_recursive))
        if any(wanted for _, wanted in groups):
            self.watches.want()
            await self.watches.ready()
        # A session carried over from the agent's predecessor: nobody heard the store for it
        # while no agent ran, so what changed then is unknown. Every data and child watch fires
        # (a client re-reads and finds what it had, at worst): a missed one would leave its
        # cache stale for good.
        missed, session.carried = session.carried, False
        for kind, wanted in groups:
            for path in wanted:
                if kind in (DATA, EXIST, CHILD):
                    exists = await self.nodes.exists(path)
                    if kind == EXIST and exists:
                        self.watches.add(kind, path, session)
                        self.watches.fire(EventType.NODE_CREATED, path, (EXIST,), {session})
                        continue
                    if kind in (DATA, CHILD) and not exists:
                        self.watches.add(kind, path, session)
                        self.watches.fire(EventType.NODE_DELETED, path, (kind,), {session})
                        continue
                    if missed and kind in (DATA, CHILD):
                        self.watches.add(kind, path, session)
                        event = EventType.NODE_DATA_CHANGED if kind == DATA else EventType.NODE_CHILDREN_CHANGED
                        self.watches.fire(event, path, (kind,), {session})
                        continue
                self.watches.add(kind, path, session)
        return b""

    async def add_watch(self, session: ZkSession, req: wire.AddWatchRequest) -> Body:
        """addWatch (106): a persistent or persistent recursive watch, answered once it is live."""
        check_path(req.path)
        self.watches.want()
        await self.watches.ready()  # answered once every later change will be seen
        if req.mode == AddWatchMode.PERSISTENT:
            self.watches.add(PERSISTENT, req.path, session)
        elif req.mode == AddWatchMode.PERSISTENT_RECURSIVE:
            self.watches.add(RECURSIVE, req.path, session)
        else:
            raise ZkError(Err.BADARGUMENTS, f"unknown addWatch mode {req.mode}")
        return Writer().int(0).bytes()  # ZooKeeper answers addWatch with an ErrorResponse(0)

    async def remove_watches(self, session: ZkSession, req: wire.RemoveWatchesRequest) -> Body:
        """removeWatches (18): the session's watches of the kinds asked for; NOWATCHER if none."""
        check_path(req.path)
        removed = False
        for kind in self.watches.kinds_for(req.type):
            removed = self.watches.remove(kind, req.path, session) or removed
        if not removed:
            raise ZkError(Err.NOWATCHER)
        return b""

    async def check_watches(self, session: ZkSession, req: wire.RemoveWatchesRequest) -> Body:
        """checkWatches (17): NOWATCHER unless the session holds one of the kinds asked for."""
        check_path(req.path)
        if not any(self.watches.has(kind, req.path, session) for kind in self.watches.kinds_for(req.type)):
            raise ZkError(Err.NOWATCHER)
        return b""

