"""What every request handler shares: ZooKeeper errors from store errors, path checks, the zxid,
and ``HandlerBase`` — the router, gate, session registry and watches, the active store, a write
through the gate, a node as ZooKeeper shows it (with ZooKeeper's own virtual ``/zookeeper``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.router import Router
from metashift.agent.core.sequence_floors import SequenceFloors
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper import pip454
from metashift.agent.zookeeper.pip454 import Pip454Flag
from metashift.agent.zookeeper.session import ZkSessions
from metashift.agent.zookeeper.stat import to_zstat
from metashift.agent.zookeeper.watches import Watches
from metashift.proto.errors import HeldForMigration
from metashift.stores import MetadataStore, paths
from metashift.stores.errors import (
    AlreadyExists,
    BadVersion,
    InvalidPath,
    NotEmpty,
    NotFound,
    StoreUnavailable,
    ValueTooLarge,
)
from metashift.stores.zookeeper.wire import Err, ZStat

#: ZooKeeper's own subtree, served by the agent itself (never read from nor written to a store).
ZK_ROOT = "/zookeeper"
VIRTUAL_CHILDREN = {ZK_ROOT: ["config", "quota"], f"{ZK_ROOT}/config": [], f"{ZK_ROOT}/quota": []}
#: Attempts of a blind write (or a sequential name) whose node keeps changing under it.
MAX_ATTEMPTS = 50

Body = bytes


class ZkError(Exception):
    """Answer the request with ZooKeeper error ``code``."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or str(code))
        self.code = code


def error_code(err: BaseException) -> int:
    """ZooKeeper's code for an error of the store or the agent."""
    if isinstance(err, ZkError):
        return err.code
    if isinstance(err, AlreadyExists):
        return Err.NODEEXISTS
    if isinstance(err, BadVersion):
        return Err.BADVERSION
    if isinstance(err, NotFound):
        return Err.NONODE
    if isinstance(err, NotEmpty):
        return Err.NOTEMPTY
    if isinstance(err, InvalidPath | ValueTooLarge | ValueError | TypeError):
        return Err.BADARGUMENTS
    if isinstance(err, HeldForMigration):
        return Err.OPERATIONTIMEOUT  # held past gate.hold_timeout: nothing was written
    if isinstance(err, StoreUnavailable):
        return Err.CONNECTIONLOSS  # ZooKeeper's word for "the outcome of a write is unknown"
    return Err.SYSTEMERROR


def check_path(path: str, sequential: bool = False) -> str:
    try:
        paths.validate(path + "0000000000" if sequential else path)
    except InvalidPath as e:
        raise ZkError(Err.BADARGUMENTS, str(e)) from None
    return path


def is_virtual(path: str) -> bool:
    return path == ZK_ROOT or path.startswith(ZK_ROOT + "/")




def parent_of(path: str) -> str:
    """The parent a create of ``path`` needs; a sequential ``/a/`` (-> ``/a/0000000001``) is /a's."""
    if path.endswith("/"):
        return path[:-1] or paths.SEPARATOR
    return paths.parent(path) or paths.SEPARATOR


def check_parent(parent: str, exists: bool, ephemeral: bool) -> None:
    """The check of a create (alone or in a multi) on its parent: there, and not ephemeral."""
    if not exists:
        raise ZkError(Err.NONODE, parent)
    if ephemeral:
        raise ZkError(Err.NOCHILDRENFOREPHEMERALS, parent)


def expect_version(path: str, exists: bool, version: int, expected: int) -> None:
    """The check of delete, setData and check (alone or in a multi): the node exists and, unless
    ``expected`` is -1, is at that version."""
    if not exists:
        raise ZkError(Err.NONODE, path)
    if expected != -1 and version != expected:
        raise ZkError(Err.BADVERSION, path)


class Zxid:
    """The zxid in every reply header: starts at the agent's start time (ms << 16), +1 per write,
    so it never goes back, across agent restarts too."""

    def __init__(self) -> None:
        self.value = int(time.time() * 1000) << 16

    def bump(self) -> int:
        self.value += 1
        return self.value




class HandlerBase:
    """The agent's parts a request handler uses, and the helpers every kind of request shares."""

    def __init__(
        self, router: Router, gate: WriteGate, registry: SessionRegistry, sessions: ZkSessions, watches: Watches,
        pip454_flag: Pip454Flag | None = None,
    ) -> None:
        self.router = router
        self.gate = gate
        self.registry = registry
        self.sessions = sessions
        self.watches = watches
        self.floors = SequenceFloors(router)
        self.zxid = Zxid()
        self.pip454 = pip454_flag or Pip454Flag()
        """PIP-454's flag, served by the front itself (``pip454``)."""

    @property
    def store(self) -> MetadataStore:
        return self.router.active

    async def _write(self, apply: Callable[[MetadataStore], Awaitable[Any]]) -> Any:
        result = await self.gate.run(apply)
        self.zxid.bump()
        return result

    def _owner(self, path: str) -> int:
        return self.sessions.owner_id(self.registry.owner_of(path))

    async def _node(self, path: str, *, children: bool = True) -> tuple[bytes, ZStat, list[str]] | None:
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
            return got[0], to_zstat(got[1], len(got[0]), 0, self._owner(path)), []
        node = await store.get_node(path)  # one round trip where the store can
        if node is None:
            return None
        value, stat, kids = node
        if path == pip454.PARENT:
            kids = sorted({*kids, pip454.NAME})
        return value, to_zstat(stat, len(value), len(kids), self._owner(path)), kids

    def _no_writes_in_zookeeper_root(self, path: str, op: str = "write", data: bytes | None = None) -> None:
        """Refuse a write of ZooKeeper's own nodes, and of PIP-454's flag (``pip454``: ``op``
        "create" with its ``data`` is a ``metadata-migration start``)."""
        if is_virtual(path) or path == paths.SEPARATOR:
            raise ZkError(Err.BADARGUMENTS, f"{path} is ZooKeeper's own")
        if pip454.is_flag(path):
            raise ZkError(self.pip454.refuse(op, data), f"{path} is PIP-454's flag: metashift migrates this cluster")

    async def _node_children(self, path: str) -> list[str]:
        if is_virtual(path):
            return list(VIRTUAL_CHILDREN.get(path, []))
        kids = await self.store.get_children(path)
        if path == pip454.PARENT and (kids or await self.store.exists(path)):
            kids = sorted({*kids, pip454.NAME})
        return kids
