"""create (and create2, createContainer, createTTL), delete, setData and check: ZooKeeper's tree
rules that a store does not keep itself (etcd has no real tree) are checked here — a create needs
its parent (``NONODE``), which must not be ephemeral (``NOCHILDRENFOREPHEMERALS``); a delete of a
node with children is ``NOTEMPTY``; setData of a missing node is ``NONODE`` (a store's blind put
would create it). Every write runs through the agent's write gate (``WriteGate.run``: while a
migration holds writes it waits, then goes to whichever store the router points at), and its
ephemerals are recorded in the ``SessionRegistry`` under the ZooKeeper session's client session.
On a store that checks these rules itself (etcd: txn compares), the front first sends a create,
setData or delete with its checks in one round (``handlers/runs.py``); it comes here when that
round's checks failed, to find out which, or for what a round cannot carry. Sequential names:
``handlers/sequential.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper.handlers.base import (
    MAX_ATTEMPTS,
    Body,
    ZkError,
    Zxid,
    check_parent,
    check_path,
    expect_version,
    is_virtual,
    parent_of,
)
from metashift.agent.zookeeper.handlers.nodes import Nodes
from metashift.agent.zookeeper.handlers.sequential import SequentialNames
from metashift.agent.zookeeper.session import ZkSession
from metashift.agent.zookeeper.stat import to_zstat
from metashift.proto.errors import NoSession
from metashift.stores import MetadataStore, Stat, paths
from metashift.stores.errors import BadVersion, MetadataStoreError, NotFound
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import CreateMode, Err, Op, Writer, ZStat

T = TypeVar("T")


def create_body(op: int, path: str, zstat: ZStat) -> Body:
    """The answer to a create (its path) or a create2 (its path and Stat)."""
    writer = Writer().string(path)
    return writer.bytes() if op == Op.CREATE else writer.stat(zstat).bytes()


class Writes:
    """The single-node writes, one method per opcode, and the checks and store writes that a
    multi (``Multi``) and a run of writes (``WriteRuns``) reuse."""

    def __init__(self, gate: WriteGate, registry: SessionRegistry, zxid: Zxid, nodes: Nodes,
                 names: SequentialNames) -> None:
        self.gate = gate
        self.registry = registry
        self.zxid = zxid
        self.nodes = nodes
        self.names = names

    async def write(self, apply: Callable[[MetadataStore], Awaitable[T]]) -> T:
        """``apply`` through the write gate, on the store it admits the write to; a new zxid."""
        result = await self.gate.run(apply)
        self.zxid.bump()
        return result

    # ---- create ---------------------------------------------------------------------------------

    async def create(self, session: ZkSession, req: wire.CreateRequest) -> Body:
        """create (1): the new path."""
        path, zstat = await self._create(session, req)
        return create_body(Op.CREATE, path, zstat)

    async def create2(self, session: ZkSession, req: wire.CreateRequest) -> Body:
        """create2, and createContainer and createTTL (kept as persistent nodes)."""
        path, zstat = await self._create(session, req)
        return create_body(Op.CREATE2, path, zstat)

    def check_create(self, req: wire.CreateRequest) -> None:
        """What a create is refused for before the store is asked."""
        if req.flags not in range(7):
            raise ZkError(Err.BADARGUMENTS, f"unknown create mode {req.flags}")
        if not req.acl:
            raise ZkError(Err.INVALIDACL)
        check_path(req.path, CreateMode.sequential(req.flags))
        self.nodes.refuse_write(req.path, "create", req.data)

    async def _create(self, session: ZkSession, req: wire.CreateRequest) -> tuple[str, ZStat]:
        self.check_create(req)
        ephemeral = CreateMode.ephemeral(req.flags)
        sequential = CreateMode.sequential(req.flags)

        async def apply(store: MetadataStore) -> Stat:
            await self.check_parent(store, req.path)
            stat = await self.names.put_new(store, req.path, req.data, ephemeral, sequential)
            return await self.after_create(store, session, req.data, ephemeral, stat)

        stat = await self.write(apply)
        return stat.path, self.created_zstat(session, stat, req.data)

    async def after_create(self, store: MetadataStore, session: ZkSession, data: bytes, ephemeral: bool,
                           stat: Stat) -> Stat:
        """A create's bookkeeping: its ephemeral recorded under the session's client, or deleted
        again when the session ended while the create was in flight (``NoSession``)."""
        client = session.client
        self.registry.record_put(client if ephemeral else None, data, ephemeral, stat)
        if ephemeral and client.ended:
            self.registry.record_delete(stat.path)
            try:
                await store.delete(stat.path, expected_version=stat.version)
            except MetadataStoreError:
                pass
            raise NoSession("the session ended while the create was in flight", stat.path)
        return stat

    @staticmethod
    def created_zstat(session: ZkSession, stat: Stat, data: bytes) -> ZStat:
        """The Stat of a node just created by ``session``."""
        return to_zstat(stat, len(data), 0, session.id if stat.ephemeral else 0)

    async def check_parent(self, store: MetadataStore, path: str) -> None:
        """A create's parent: there, not ephemeral, not ZooKeeper's own."""
        parent = parent_of(path)
        if parent == paths.SEPARATOR:
            return
        if is_virtual(parent):
            raise ZkError(Err.BADARGUMENTS, f"{parent} is ZooKeeper's own")
        got = await store.get(parent)
        check_parent(parent, got is not None, got is not None and got[1].ephemeral)

    # ---- delete, setData, check ------------------------------------------------------------------

    async def delete(self, session: ZkSession, req: wire.DeleteRequest) -> Body:
        """delete (2): the node, at its version, if it has no children."""
        check_path(req.path)
        self.nodes.refuse_write(req.path)

        async def apply(store: MetadataStore) -> None:
            await self.delete_checked(store, req.path, req.version)

        await self.write(apply)
        return b""

    async def delete_checked(self, store: MetadataStore, path: str, version: int) -> None:
        """Delete ``path`` at ``version`` (-1: any) if it has no children."""
        for _ in range(MAX_ATTEMPTS):
            got, kids = await asyncio.gather(store.get(path), store.get_children(path))
            expect_version(path, got is not None, got[1].version if got else 0, version)
            assert got is not None
            if kids:
                raise ZkError(Err.NOTEMPTY, path)
            try:
                await store.delete(path, got[1].version)
            except BadVersion:
                if version == -1:
                    continue  # changed under us: a blind delete tries again
                raise
            except NotFound:
                raise ZkError(Err.NONODE, path) from None
            self.registry.record_delete(path)
            return
        raise ZkError(Err.SYSTEMERROR, f"{path} kept changing")

    async def set_data(self, session: ZkSession, req: wire.SetDataRequest) -> Body:
        """setData (5): the new value; the new Stat."""
        check_path(req.path)
        self.nodes.refuse_write(req.path)

        async def apply(store: MetadataStore) -> tuple[Stat, int]:
            return await self.set_checked(store, req.path, req.data, req.version)

        stat, children = await self.write(apply)
        return self.set_body(stat, req.data, children)

    def set_body(self, stat: Stat, data: bytes, children: int) -> Body:
        """setData's answer: the node's new Stat."""
        return Writer().stat(to_zstat(stat, len(data), children, self.nodes.owner(stat.path))).bytes()

    async def set_checked(self, store: MetadataStore, path: str, data: bytes, version: int) -> tuple[Stat, int]:
        """setData: the new Stat and the node's number of children, in one round trip where the
        store can (``MetadataStore.set_data``; an ephemeral stays ephemeral)."""
        try:
            stat, children = await store.set_data(path, data, None if version == -1 else version)
        except NotFound:
            raise ZkError(Err.NONODE, path) from None
        self.registry.record_put(None, data, stat.ephemeral, stat)
        return stat, children

    async def check(self, session: ZkSession, req: wire.CheckVersionRequest) -> Body:
        """check (13): the node exists at the version (-1: any); mostly a multi's."""
        node = await self.nodes.node(check_path(req.path), children=False)
        expect_version(req.path, node is not None, node[1].version if node else 0, req.version)
        return b""
