"""The tree as ZooKeeper clients see it: the active store's nodes with ZooKeeper's Stat, the root
listing ``zookeeper``, ZooKeeper's own virtual ``/zookeeper`` (never read from nor written to a
store), and PIP-454's flag, served by the front itself (``pip454``)."""

from __future__ import annotations

import asyncio

from metashift.agent.core.router import Router
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper import pip454
from metashift.agent.zookeeper.handlers.base import VIRTUAL_CHILDREN, ZK_ROOT, ZkError, is_virtual
from metashift.agent.zookeeper.pip454 import Pip454Flag
from metashift.agent.zookeeper.session import ZkSessions
from metashift.agent.zookeeper.stat import to_zstat
from metashift.stores import MetadataStore, paths
from metashift.stores.errors import InvalidPath
from metashift.stores.zookeeper.wire import Err, ZStat

#: A node as ZooKeeper shows it: value, Stat, children.
Node = tuple[bytes, ZStat, list[str]]


class Nodes:
    """Nodes as ZooKeeper shows them, and the nodes no client may write (the module's doc)."""

    def __init__(self, router: Router, registry: SessionRegistry, sessions: ZkSessions, flag: Pip454Flag) -> None:
        self.router = router
        self.registry = registry
        self.sessions = sessions
        self.pip454 = flag

    @property
    def store(self) -> MetadataStore:
        """The router's active store (looked up on each use: the router may switch between two)."""
        return self.router.active

    def owner(self, path: str) -> int:
        """The id of the front's ZooKeeper session that owns the ephemeral ``path`` (0: none)."""
        return self.sessions.owner_id(self.registry.owner_of(path))

    async def node(self, path: str, *, children: bool = True) -> Node | None:
        """The value, ZooKeeper Stat and children of ``path``; None when it does not exist."""
        if is_virtual(path):
            virtual = VIRTUAL_CHILDREN.get(path)
            if virtual is None:
                return None
            return b"", ZStat(num_children=len(virtual), cversion=len(virtual)), list(virtual)
        if pip454.is_flag(path):
            return self.pip454.node() if path == pip454.FLAG else None
        store = self.store
        if path == paths.SEPARATOR:
            got, kids = await asyncio.gather(store.get(path), store.get_children(path))
            kids = sorted({*kids, ZK_ROOT[1:]})
            value = got[0] if got is not None else b""
            return value, ZStat(num_children=len(kids), cversion=len(kids), data_length=len(value)), kids
        if not children:
            got = await store.get(path)
            if got is None:
                return None
            return got[0], to_zstat(got[1], len(got[0]), 0, self.owner(path)), []
        node = await store.get_node(path)  # one round trip where the store can
        if node is None:
            return None
        value, stat, kids = node
        kids = self.pip454.listed(path, kids)
        return value, to_zstat(stat, len(value), len(kids), self.owner(path)), kids

    async def children(self, path: str) -> list[str]:
        """The children of ``path`` (none when it does not exist)."""
        if is_virtual(path):
            return list(VIRTUAL_CHILDREN.get(path, []))
        kids = await self.store.get_children(path)
        if path == pip454.PARENT and (kids or await self.store.exists(path)):
            kids = self.pip454.listed(path, kids)
        return kids

    async def exists(self, path: str) -> bool:
        """Whether ``path`` exists (an invalid path does not)."""
        if is_virtual(path):
            return path in VIRTUAL_CHILDREN
        if path == paths.SEPARATOR:
            return True
        try:
            return await self.store.exists(path)
        except InvalidPath:
            return False

    def refuse_write(self, path: str, op: str = "write", data: bytes | None = None) -> None:
        """Refuse a write of ZooKeeper's own nodes, and of PIP-454's flag (``pip454``: ``op``
        "create" with its ``data`` is a ``metadata-migration start``)."""
        if is_virtual(path) or path == paths.SEPARATOR:
            raise ZkError(Err.BADARGUMENTS, f"{path} is ZooKeeper's own")
        if pip454.is_flag(path):
            raise ZkError(self.pip454.refuse(op, data), f"{path} is PIP-454's flag: metashift migrates this cluster")
