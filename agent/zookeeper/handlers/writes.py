"""create (and create2, createContainer, createTTL), delete, setData and check: ZooKeeper's tree
rules that a store does not keep itself (etcd has no real tree) are checked here — a create needs
its parent (``NONODE``), which must not be ephemeral (``NOCHILDRENFOREPHEMERALS``); a delete of a
node with children is ``NOTEMPTY``; setData of a missing node is ``NONODE`` (a store's blind put
would create it). Every write runs through the agent's write gate (``WriteGate.run``: while a
migration holds writes it waits, then goes to whichever store the router points at), and its
ephemerals are recorded in the ``SessionRegistry`` under the ZooKeeper session's client session.

Sequential names are ZooKeeper's (ten digits): on a ZooKeeper store they are ZooKeeper's own; on
etcd the counter is the parent key's version (Pulsar's layout, bumped by a compare-and-set that
keeps the parent's value), raised above every existing child's number so a lock queue never goes
backwards after a migration. Under a counter that a migration retired (a ledger-id generator's
old counters, ``metashift.agent.sequence_floors``), on either store, the number is taken from
the counter's floor instead: a client that still uses it gets ids above the source's."""

from __future__ import annotations

import asyncio
import re

from metashift.agent.errors import NoSession
from metashift.agent.zookeeper import codec
from metashift.agent.zookeeper.codec import CreateMode, Err, Op, Writer, ZStat
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
from metashift.stores import MetadataStore, Stat, paths
from metashift.stores.errors import AlreadyExists, BadVersion, MetadataStoreError, NotFound

_SEQ_DIGITS = re.compile(r"(\d{10})$")


class WriteRequests(HandlerBase):
    """The single-node writes, and the checks and store writes a multi reuses."""

    # ---- create ---------------------------------------------------------------------------------

    async def _create(self, session: ZkSession, req: codec.CreateRequest) -> Body:
        path, _ = await self._do_create(session, req, Op.CREATE)
        return Writer().string(path).bytes()

    async def _create2(self, session: ZkSession, req: codec.CreateRequest) -> Body:
        path, zstat = await self._do_create(session, req, Op.CREATE2)
        return Writer().string(path).stat(zstat).bytes()

    def _check_create(self, req: codec.CreateRequest) -> None:
        if req.flags not in range(7):
            raise ZkError(Err.BADARGUMENTS, f"unknown create mode {req.flags}")
        if not req.acl:
            raise ZkError(Err.INVALIDACL)
        check_path(req.path, CreateMode.sequential(req.flags))
        self._no_writes_in_zookeeper_root(req.path)

    async def _do_create(self, session: ZkSession, req: codec.CreateRequest, op: int) -> tuple[str, ZStat]:
        self._check_create(req)
        ephemeral = CreateMode.ephemeral(req.flags)
        sequential = CreateMode.sequential(req.flags)
        client = session.client

        async def apply(store: MetadataStore) -> Stat:
            await self._check_parent(store, req.path)
            stat = await self._put_new(store, req.path, req.data, ephemeral, sequential)
            self.registry.record_put(client if ephemeral else None, req.data, ephemeral, stat)
            if ephemeral and client.ended:  # the session ended while the create was in flight
                self.registry.record_delete(stat.path)
                try:
                    await store.delete(stat.path, expected_version=stat.version)
                except MetadataStoreError:
                    pass
                raise NoSession("the session ended while the create was in flight", stat.path)
            return stat

        stat = await self._write(apply)
        zstat = to_zstat(stat, len(req.data), 0, session.id if ephemeral else 0)
        return stat.path, zstat

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
        if store.url.scheme == "zk":  # ZooKeeper's own sequential names
            return await store.put(path, data, -1, ephemeral=ephemeral, sequential=True)
        for _ in range(MAX_ATTEMPTS):
            counter = await self._next_sequence(store, parent)
            name = f"{path}{counter:010d}"
            try:
                return await store.put(name, data, -1, ephemeral=ephemeral)
            except AlreadyExists:
                continue
        raise ZkError(Err.SYSTEMERROR, f"no free sequential name under {parent}")

    async def _next_sequence(self, store: MetadataStore, parent: str) -> int:
        """The next sequential number under ``parent`` on a store without ZooKeeper's own: the
        parent key's version bumped by a compare-and-set of its unchanged value (Pulsar's etcd
        counter), at least one more than the highest ten-digit suffix among its children."""
        kids = await store.get_children(parent)
        floor = 0
        for kid in kids:
            m = _SEQ_DIGITS.search(kid)
            if m:
                floor = max(floor, int(m.group(1)) + 1)
        for _ in range(MAX_ATTEMPTS):
            got = await store.get(parent) if parent != paths.SEPARATOR else None
            try:
                if got is None:
                    stat = await store.put(parent, b"", None)
                else:
                    stat = await store.put(parent, got[0], got[1].version, ephemeral=got[1].ephemeral)
            except BadVersion:
                continue
            return max(stat.version, floor)
        raise ZkError(Err.SYSTEMERROR, f"the sequence counter of {parent} kept moving")

    # ---- delete, setData, check ------------------------------------------------------------------

    async def _delete(self, session: ZkSession, req: codec.DeleteRequest) -> Body:
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

    async def _set_data(self, session: ZkSession, req: codec.SetDataRequest) -> Body:
        check_path(req.path)
        self._no_writes_in_zookeeper_root(req.path)

        async def apply(store: MetadataStore) -> Stat:
            return await self._set_checked(store, req.path, req.data, req.version)

        stat = await self._write(apply)
        return Writer().stat(await self._zstat_after_write(stat, len(req.data))).bytes()

    async def _set_checked(self, store: MetadataStore, path: str, data: bytes, version: int) -> Stat:
        for _ in range(MAX_ATTEMPTS):
            got = await store.get(path)
            expect_version(path, got is not None, got[1].version if got else 0, version)
            assert got is not None
            ephemeral = got[1].ephemeral
            try:
                # an ephemeral stays ephemeral: on etcd a put without the lease would make it persistent
                stat = await store.put(path, data, got[1].version, ephemeral=ephemeral)
            except BadVersion:
                if version == -1:
                    continue
                raise
            self.registry.record_put(None, data, ephemeral, stat)
            return stat
        raise ZkError(Err.SYSTEMERROR, f"{path} kept changing")

    async def _check(self, session: ZkSession, req: codec.CheckVersionRequest) -> Body:
        node = await self._node(check_path(req.path), children=False)
        expect_version(req.path, node is not None, node[1].version if node else 0, req.version)
        return b""

