"""create (and create2, createContainer, createTTL), delete, setData and check: ZooKeeper's tree
rules that a store does not keep itself (etcd has no real tree) are checked here — a create needs
its parent (``NONODE``), which must not be ephemeral (``NOCHILDRENFOREPHEMERALS``); a delete of a
node with children is ``NOTEMPTY``; setData of a missing node is ``NONODE`` (a store's blind put
would create it). Every write runs through the agent's write gate (``WriteGate.run``: while a
migration holds writes it waits, then goes to whichever store the router points at), and its
ephemerals are recorded in the ``SessionRegistry`` under the ZooKeeper session's client session.
On a store that checks these rules itself (etcd: txn compares), the front first sends a create,
setData or delete with its checks in one round (``handlers/runs.py``); it comes here when that
round's checks failed, to find out which, or for what a round cannot carry.

Sequential names are ZooKeeper's (ten digits): on a ZooKeeper store they are ZooKeeper's own; on
etcd the counter is the parent key's version (Pulsar's layout, bumped by a compare-and-set that
keeps the parent's value), raised above every existing child's number so a lock queue never goes
backwards after a migration. Under a counter that a migration retired (a ledger-id generator's
old counters, ``metashift.agent.core.sequence_floors``), on either store, the number is taken from
the counter's floor instead: a client that still uses it gets ids above the source's."""

from __future__ import annotations

import asyncio

from metashift.agent.zookeeper.handlers.base import (
    MAX_ATTEMPTS,
    Body,
    HandlerBase,
    ZkError,
    check_parent,
    check_path,
    expect_version,
    is_virtual,
    parent_of,
)
from metashift.agent.zookeeper.session import ZkSession
from metashift.agent.zookeeper.stat import to_zstat
from metashift.proto.errors import NoSession
from metashift.stores import MetadataStore, Stat, paths
from metashift.stores.errors import AlreadyExists, BadVersion, MetadataStoreError, NotFound
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import CreateMode, Err, Op, Writer, ZStat


def create_body(op: int, path: str, zstat: ZStat) -> Body:
    """The answer to a create (its path) or a create2 (its path and Stat)."""
    writer = Writer().string(path)
    return writer.bytes() if op == Op.CREATE else writer.stat(zstat).bytes()


class WriteRequests(HandlerBase):
    """The single-node writes, and the checks and store writes a multi reuses."""

    # ---- create ---------------------------------------------------------------------------------

    async def _create(self, session: ZkSession, req: wire.CreateRequest) -> Body:
        path, zstat = await self._do_create(session, req)
        return create_body(Op.CREATE, path, zstat)

    async def _create2(self, session: ZkSession, req: wire.CreateRequest) -> Body:
        path, zstat = await self._do_create(session, req)
        return create_body(Op.CREATE2, path, zstat)

    def _check_create(self, req: wire.CreateRequest) -> None:
        if req.flags not in range(7):
            raise ZkError(Err.BADARGUMENTS, f"unknown create mode {req.flags}")
        if not req.acl:
            raise ZkError(Err.INVALIDACL)
        check_path(req.path, CreateMode.sequential(req.flags))
        self._no_writes_in_zookeeper_root(req.path, "create", req.data)

    async def _do_create(self, session: ZkSession, req: wire.CreateRequest) -> tuple[str, ZStat]:
        self._check_create(req)
        ephemeral = CreateMode.ephemeral(req.flags)
        sequential = CreateMode.sequential(req.flags)

        async def apply(store: MetadataStore) -> Stat:
            await self._check_parent(store, req.path)
            stat = await self._put_new(store, req.path, req.data, ephemeral, sequential)
            return await self._after_create(store, session, req.data, ephemeral, stat)

        stat = await self._write(apply)
        return stat.path, self._created_zstat(session, stat, req.data)

    async def _after_create(self, store: MetadataStore, session: ZkSession, data: bytes, ephemeral: bool,
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
    def _created_zstat(session: ZkSession, stat: Stat, data: bytes) -> ZStat:
        return to_zstat(stat, len(data), 0, session.id if stat.ephemeral else 0)

    async def _check_parent(self, store: MetadataStore, path: str) -> None:
        parent = parent_of(path)
        if parent == paths.SEPARATOR:
            return
        if is_virtual(parent):
            raise ZkError(Err.BADARGUMENTS, f"{parent} is ZooKeeper's own")
        got = await store.get(parent)
        check_parent(parent, got is not None, got is not None and got[1].ephemeral)

    async def _put_new(self, store: MetadataStore, path: str, data: bytes, ephemeral: bool, sequential: bool) -> Stat:
        if not sequential:
            return await store.put(path, data, -1, ephemeral=ephemeral)
        parent = parent_of(path)
        for _ in range(MAX_ATTEMPTS):
            taken = await self.floors.take(store, parent)
            if taken is None:
                break
            try:
                return await store.put(f"{path}{taken:010d}", data, -1, ephemeral=ephemeral)
            except AlreadyExists:
                continue
        else:
            raise ZkError(Err.SYSTEMERROR, f"no free sequential name under {parent}")
        if store.zookeeper_sequential_names:  # ZooKeeper's own sequential names
            return await store.put(path, data, -1, ephemeral=ephemeral, sequential=True)
        for _ in range(MAX_ATTEMPTS):
            try:
                counter = await store.next_sequence(parent)
            except BadVersion:
                raise ZkError(Err.SYSTEMERROR, f"the sequence counter of {parent} kept moving") from None
            name = f"{path}{counter:010d}"
            try:
                return await store.put(name, data, -1, ephemeral=ephemeral)
            except AlreadyExists:
                continue
        raise ZkError(Err.SYSTEMERROR, f"no free sequential name under {parent}")

    # ---- delete, setData, check ------------------------------------------------------------------

    async def _delete(self, session: ZkSession, req: wire.DeleteRequest) -> Body:
        check_path(req.path)
        self._no_writes_in_zookeeper_root(req.path)

        async def apply(store: MetadataStore) -> None:
            await self._delete_checked(store, req.path, req.version)

        await self._write(apply)
        return b""

    async def _delete_checked(self, store: MetadataStore, path: str, version: int) -> None:
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

    async def _set_data(self, session: ZkSession, req: wire.SetDataRequest) -> Body:
        check_path(req.path)
        self._no_writes_in_zookeeper_root(req.path)

        async def apply(store: MetadataStore) -> tuple[Stat, int]:
            return await self._set_checked(store, req.path, req.data, req.version)

        stat, children = await self._write(apply)
        return self._set_body(stat, req.data, children)

    def _set_body(self, stat: Stat, data: bytes, children: int) -> Body:
        return Writer().stat(to_zstat(stat, len(data), children, self._owner(stat.path))).bytes()

    async def _set_checked(self, store: MetadataStore, path: str, data: bytes, version: int) -> tuple[Stat, int]:
        """setData: the new Stat and the node's number of children, in one round trip where the
        store can (``MetadataStore.set_data``; an ephemeral stays ephemeral)."""
        try:
            stat, children = await store.set_data(path, data, None if version == -1 else version)
        except NotFound:
            raise ZkError(Err.NONODE, path) from None
        self.registry.record_put(None, data, stat.ephemeral, stat)
        return stat, children

    async def _check(self, session: ZkSession, req: wire.CheckVersionRequest) -> Body:
        node = await self._node(check_path(req.path), children=False)
        expect_version(req.path, node is not None, node[1].version if node else 0, req.version)
        return b""

