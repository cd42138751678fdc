"""One coroutine per ZooKeeper request type. Reads go to the router's active store; every write
runs through the agent's write gate (``WriteGate.run``: while a migration holds writes it waits,
and then goes to whichever store the router points at), and its ephemerals are recorded in the
``SessionRegistry`` under the ZooKeeper session's client session.

ZooKeeper's tree rules that a store does not keep itself (etcd has no real tree) are checked
here: a create needs its parent (``NONODE``) and the parent must not be ephemeral
(``NOCHILDRENFOREPHEMERALS``); a delete of a node with children is ``NOTEMPTY``; setData of a
missing node is ``NONODE`` (a store's blind put would create it). Sequential names are ZooKeeper's
(ten digits): on a ZooKeeper store they are ZooKeeper's own; on etcd the counter is the parent
key's version (Pulsar's layout, bumped by a compare-and-set that keeps the parent's value), raised
above every existing child's number so a lock queue never goes backwards after a migration.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from metashift.agent.errors import HeldForMigration, NoSession
from metashift.agent.gate import WriteGate
from metashift.agent.router import Router
from metashift.agent.sessions import SessionRegistry
from metashift.agent.zookeeper import codec
from metashift.agent.zookeeper.codec import (
    OPEN_ACL_UNSAFE,
    AddWatchMode,
    ChildInfo,
    CreateMode,
    Err,
    EventType,
    MultiResult,
    Op,
    Writer,
    ZStat,
)
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.agent.zookeeper.stat import to_zstat
from metashift.agent.zookeeper.watches import CHILD, DATA, EXIST, PERSISTENT, RECURSIVE, Watches
from metashift.stores import MetadataStore, Stat, paths
from metashift.stores.errors import (
    AlreadyExists,
    BadVersion,
    InvalidPath,
    MetadataStoreError,
    NotEmpty,
    NotFound,
    StoreUnavailable,
    ValueTooLarge,
)

log = logging.getLogger(__name__)

#: ZooKeeper's own subtree, served by the agent itself (never read from nor written to a store).
ZK_ROOT = "/zookeeper"
_VIRTUAL_CHILDREN = {ZK_ROOT: ["config", "quota"], f"{ZK_ROOT}/config": [], f"{ZK_ROOT}/quota": []}
_SEQ_DIGITS = re.compile(r"(\d{10})$")
MAX_SEQUENTIAL_ATTEMPTS = 50

Body = bytes
Result = tuple[int, Body]


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


class Zxid:
    """The zxid in every reply header: starts at the agent's start time (ms << 16), +1 per write,
    so it never goes back, across agent restarts too."""

    def __init__(self) -> None:
        self.value = int(time.time() * 1000) << 16

    def bump(self) -> int:
        self.value += 1
        return self.value


@dataclass
class _Node:
    """What a multi's check phase knows of a path: exists, version, ephemeral, children count."""

    exists: bool
    version: int = 0
    ephemeral: bool = False
    children: int = 0


class Handlers:
    """The ZooKeeper requests, on the agent's router, gate and session registry."""

    def __init__(
        self, router: Router, gate: WriteGate, registry: SessionRegistry, sessions: ZkSessions, watches: Watches
    ) -> None:
        self.router = router
        self.gate = gate
        self.registry = registry
        self.sessions = sessions
        self.watches = watches
        self.zxid = Zxid()
        self._table: dict[int, Callable[[ZkSession, Any], Awaitable[Body]]] = {
            Op.CREATE: self._create,
            Op.CREATE2: self._create2,
            Op.CREATE_CONTAINER: self._create2,
            Op.CREATE_TTL: self._create2,
            Op.DELETE: self._delete,
            Op.EXISTS: self._exists,
            Op.GET_DATA: self._get_data,
            Op.SET_DATA: self._set_data,
            Op.GET_ACL: self._get_acl,
            Op.SET_ACL: self._set_acl,
            Op.GET_CHILDREN: self._get_children,
            Op.GET_CHILDREN2: self._get_children2,
            Op.SYNC: self._sync,
            Op.CHECK: self._check,
            Op.MULTI: self._multi,
            Op.MULTI_READ: self._multi_read,
            Op.SET_WATCHES: self._set_watches,
            Op.SET_WATCHES2: self._set_watches,
            Op.ADD_WATCH: self._add_watch,
            Op.REMOVE_WATCHES: self._remove_watches,
            Op.CHECK_WATCHES: self._check_watches,
            Op.GET_EPHEMERALS: self._get_ephemerals,
            Op.GET_ALL_CHILDREN_NUMBER: self._get_all_children_number,
            Op.WHO_AM_I: self._who_am_i,
        }

    #: Requests that change nothing: a run of them may be served concurrently.
    READS = frozenset({
        Op.EXISTS, Op.GET_DATA, Op.GET_ACL, Op.GET_CHILDREN, Op.GET_CHILDREN2, Op.MULTI_READ,
        Op.GET_EPHEMERALS, Op.GET_ALL_CHILDREN_NUMBER, Op.WHO_AM_I, Op.CHECK_WATCHES,
    })

    async def handle(self, session: ZkSession, op: int, request: Any) -> tuple[int, Body, int]:
        """Serve one request: (error code, body, zxid for the reply header)."""
        handler = self._table.get(op)
        if handler is None or request is None:
            return Err.UNIMPLEMENTED, b"", self.zxid.value
        try:
            body = await handler(session, request)
        except asyncio.CancelledError:
            raise
        except (MetadataStoreError, ZkError, ValueError, TypeError) as err:
            code = error_code(err)
            if code in (Err.SYSTEMERROR, Err.CONNECTIONLOSS):
                log.warning("zookeeper request %d failed: %s", op, err)
            return code, b"", self.zxid.value
        except Exception:
            log.exception("zookeeper request %d failed unexpectedly", op)
            return Err.SYSTEMERROR, b"", self.zxid.value
        return Err.OK, body, self.zxid.value

    # ---- helpers --------------------------------------------------------------------------------

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
            virtual = _VIRTUAL_CHILDREN.get(path)
            if virtual is None:
                return None
            return b"", ZStat(num_children=len(virtual), cversion=len(virtual)), list(virtual)
        store = self.store
        kids: list[str] = []
        if children:
            got, kids = await asyncio.gather(store.get(path), store.get_children(path))
        else:
            got = await store.get(path)
        if path == paths.SEPARATOR:
            kids = sorted({*kids, ZK_ROOT[1:]})
            value = got[0] if got is not None else b""
            return value, ZStat(num_children=len(kids), cversion=len(kids), data_length=len(value)), kids
        if got is None:
            return None
        value, stat = got
        return value, to_zstat(stat, len(value), len(kids), self._owner(path)), kids

    async def _zstat_after_write(self, stat: Stat, data_length: int) -> ZStat:
        kids = await self.store.get_children(stat.path)
        return to_zstat(stat, data_length, len(kids), self._owner(stat.path))

    def _no_writes_in_zookeeper_root(self, path: str) -> None:
        if is_virtual(path) or path == paths.SEPARATOR:
            raise ZkError(Err.BADARGUMENTS, f"{path} is ZooKeeper's own")

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
        parent = paths.parent(path.rstrip("/") if path.endswith("/") else path) or paths.SEPARATOR
        if path.endswith("/"):  # sequential "/a/" -> "/a/0000000001": the parent is /a
            parent = path[:-1] or paths.SEPARATOR
        if parent == paths.SEPARATOR:
            return
        if is_virtual(parent):
            raise ZkError(Err.BADARGUMENTS, f"{parent} is ZooKeeper's own")
        got = await store.get(parent)
        if got is None:
            raise ZkError(Err.NONODE, parent)
        if got[1].ephemeral:
            raise ZkError(Err.NOCHILDRENFOREPHEMERALS, parent)

    async def _put_new(self, store: MetadataStore, path: str, data: bytes, ephemeral: bool, sequential: bool) -> Stat:
        if not sequential:
            return await store.put(path, data, -1, ephemeral=ephemeral)
        if store.url.scheme == "zk":  # ZooKeeper's own sequential names
            return await store.put(path, data, -1, ephemeral=ephemeral, sequential=True)
        parent = path[:-1] if path.endswith("/") else (paths.parent(path) or paths.SEPARATOR)
        parent = parent or paths.SEPARATOR
        for _ in range(MAX_SEQUENTIAL_ATTEMPTS):
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
        for _ in range(MAX_SEQUENTIAL_ATTEMPTS):
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
        for _ in range(MAX_SEQUENTIAL_ATTEMPTS):
            got, kids = await asyncio.gather(store.get(path), store.get_children(path))
            if got is None:
                raise ZkError(Err.NONODE, path)
            if version != -1 and got[1].version != version:
                raise ZkError(Err.BADVERSION, path)
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
        for _ in range(MAX_SEQUENTIAL_ATTEMPTS):
            got = await store.get(path)
            if got is None:
                raise ZkError(Err.NONODE, path)
            if version != -1 and got[1].version != version:
                raise ZkError(Err.BADVERSION, path)
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
        if node is None:
            raise ZkError(Err.NONODE)
        if req.version != -1 and node[1].version != req.version:
            raise ZkError(Err.BADVERSION)
        return b""

    # ---- reads ----------------------------------------------------------------------------------

    async def _exists(self, session: ZkSession, req: codec.PathWatchRequest) -> Body:
        check_path(req.path)
        node = await self._node(req.path)
        if req.watch:
            self.watches.add(DATA if node is not None else EXIST, req.path, session)
        if node is None:
            raise ZkError(Err.NONODE)
        return Writer().stat(node[1]).bytes()

    async def _get_data(self, session: ZkSession, req: codec.PathWatchRequest) -> Body:
        check_path(req.path)
        node = await self._node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        if req.watch:
            self.watches.add(DATA, req.path, session)
        return Writer().buffer(node[0]).stat(node[1]).bytes()

    async def _children(self, session: ZkSession, req: codec.PathWatchRequest) -> tuple[list[str], ZStat]:
        check_path(req.path)
        node = await self._node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        if req.watch:
            self.watches.add(CHILD, req.path, session)
        return node[2], node[1]

    async def _get_children(self, session: ZkSession, req: codec.PathWatchRequest) -> Body:
        kids, _ = await self._children(session, req)
        return Writer().strings(kids).bytes()

    async def _get_children2(self, session: ZkSession, req: codec.PathWatchRequest) -> Body:
        kids, zstat = await self._children(session, req)
        return Writer().strings(kids).stat(zstat).bytes()

    async def _get_all_children_number(self, session: ZkSession, req: codec.PathRequest) -> Body:
        check_path(req.path)
        node = await self._node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        total = 0
        level = [paths.join(req.path, k) for k in node[2]]
        while level:
            total += len(level)
            listed = await asyncio.gather(*(self._node_children(p) for p in level))
            level = [paths.join(p, k) for p, kids in zip(level, listed, strict=True) for k in kids]
        return Writer().int(total).bytes()

    async def _node_children(self, path: str) -> list[str]:
        if is_virtual(path):
            return list(_VIRTUAL_CHILDREN.get(path, []))
        return await self.store.get_children(path)

    async def _get_ephemerals(self, session: ZkSession, req: codec.PathRequest) -> Body:
        prefix = req.path or paths.SEPARATOR
        found = sorted(p for p in session.client.ephemerals if prefix == paths.SEPARATOR or p.startswith(prefix))
        return Writer().strings(found).bytes()

    async def _sync(self, session: ZkSession, req: codec.PathRequest) -> Body:
        check_path(req.path)
        return Writer().string(req.path).bytes()

    # ---- ACLs and auth ----------------------------------------------------------------------------

    async def _get_acl(self, session: ZkSession, req: codec.PathRequest) -> Body:
        check_path(req.path)
        node = await self._node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        return Writer().acls(OPEN_ACL_UNSAFE).stat(node[1]).bytes()

    async def _set_acl(self, session: ZkSession, req: codec.SetACLRequest) -> Body:
        check_path(req.path)
        if not req.acl:
            raise ZkError(Err.INVALIDACL)
        node = await self._node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        if req.version not in (-1, node[1].aversion):
            raise ZkError(Err.BADVERSION)
        return Writer().stat(node[1]).bytes()

    @staticmethod
    def add_auth(session: ZkSession, req: codec.AuthRequest) -> int:
        """addAuth: ``digest`` (user:password) is recorded (whoAmI names it); other schemes fail."""
        if req.scheme != "digest":
            return Err.AUTHFAILED
        text = req.auth.decode("utf-8", "replace")
        user, sep, password = text.partition(":")
        if not sep or not user:
            return Err.AUTHFAILED
        digest = base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode()
        info = ChildInfo("digest", f"{user}:{digest}")
        if info not in session.auth:
            session.auth.append(info)
        return Err.OK

    async def _who_am_i(self, session: ZkSession, req: codec.EmptyRequest) -> Body:
        infos = [ChildInfo("ip", "127.0.0.1"), *(ChildInfo(i.scheme, i.user.split(":", 1)[0]) for i in session.auth)]
        w = Writer().int(len(infos))
        for info in infos:
            w.string(info.scheme).string(info.user)
        return w.bytes()

    # ---- watches --------------------------------------------------------------------------------

    async def _set_watches(self, session: ZkSession, req: codec.SetWatchesRequest) -> Body:
        """Re-set a reconnecting client's watches. The session kept its watches on the agent and
        events that fired while it was away were delivered on re-attach; a watch whose condition
        already holds fires now (exist: the node is there; data, child: the node is gone)."""
        groups = ((DATA, req.data), (EXIST, req.exist), (CHILD, req.child),
                  (PERSISTENT, req.persistent), (RECURSIVE, req.persistent_recursive))
        for kind, wanted in groups:
            for path in wanted:
                if kind in (DATA, EXIST, CHILD):
                    exists = await self._exists_any(path)
                    if kind == EXIST and exists:
                        self.watches.add(kind, path, session)
                        self.watches.fire(EventType.NODE_CREATED, path, (EXIST,), {session})
                        continue
                    if kind in (DATA, CHILD) and not exists:
                        self.watches.add(kind, path, session)
                        self.watches.fire(EventType.NODE_DELETED, path, (kind,), {session})
                        continue
                self.watches.add(kind, path, session)
        return b""

    async def _exists_any(self, path: str) -> bool:
        if is_virtual(path):
            return path in _VIRTUAL_CHILDREN
        if path == paths.SEPARATOR:
            return True
        try:
            return await self.store.exists(path)
        except InvalidPath:
            return False

    async def _add_watch(self, session: ZkSession, req: codec.AddWatchRequest) -> Body:
        check_path(req.path)
        if req.mode == AddWatchMode.PERSISTENT:
            self.watches.add(PERSISTENT, req.path, session)
        elif req.mode == AddWatchMode.PERSISTENT_RECURSIVE:
            self.watches.add(RECURSIVE, req.path, session)
        else:
            raise ZkError(Err.BADARGUMENTS, f"unknown addWatch mode {req.mode}")
        return Writer().int(0).bytes()  # ZooKeeper answers addWatch with an ErrorResponse(0)

    async def _remove_watches(self, session: ZkSession, req: codec.RemoveWatchesRequest) -> Body:
        check_path(req.path)
        removed = False
        for kind in self.watches.kinds_for(req.type):
            removed = self.watches.remove(kind, req.path, session) or removed
        if not removed:
            raise ZkError(Err.NOWATCHER)
        return b""

    async def _check_watches(self, session: ZkSession, req: codec.RemoveWatchesRequest) -> Body:
        check_path(req.path)
        if not any(self.watches.has(kind, req.path, session) for kind in self.watches.kinds_for(req.type)):
            raise ZkError(Err.NOWATCHER)
        return b""

    # ---- multi ------------------------------------------------------------------------------------

    async def _multi_read(self, session: ZkSession, req: codec.MultiRequest) -> Body:
        results: list[MultiResult] = []
        for op, sub in req.ops:
            if op not in (Op.GET_DATA, Op.GET_CHILDREN):
                raise ZkError(Err.BADARGUMENTS, "multiRead holds getData and getChildren only")
            try:
                if op == Op.GET_DATA:
                    check_path(sub.path)
                    node = await self._node(sub.path)
                    if node is None:
                        raise ZkError(Err.NONODE)
                    results.append(MultiResult(Op.GET_DATA, 0, (node[0], node[1])))
                else:
                    kids, _ = await self._children(session, codec.PathWatchRequest(sub.path, False))
                    results.append(MultiResult(Op.GET_CHILDREN, 0, kids))
            except (ZkError, MetadataStoreError) as err:
                results.append(MultiResult(Op.ERROR, error_code(err)))
        return codec.encode_multi(results)

    async def _multi(self, session: ZkSession, req: codec.MultiRequest) -> Body:
        """All or nothing against every check a single call would make: every operation is first
        checked in order against the store as the earlier ones would leave it, and if one fails
        nothing is written (its error, OK before it, RUNTIMEINCONSISTENCY after it, as ZooKeeper
        answers). Then they are applied in order, each conditional on the version the check saw:
        a writer racing in between makes the multi fail part-way (documented)."""
        for op, _ in req.ops:
            if op not in (Op.CREATE, Op.CREATE2, Op.CREATE_CONTAINER, Op.CREATE_TTL, Op.DELETE, Op.SET_DATA, Op.CHECK):
                raise ZkError(Err.BADARGUMENTS, f"opcode {op} cannot be part of a multi")
        if not req.ops:
            return codec.encode_multi([])

        async def apply(store: MetadataStore) -> list[MultiResult]:
            failed = await self._multi_check(store, req.ops)
            if failed is not None:
                index, code = failed
                return [
                    MultiResult(Op.ERROR, Err.OK if i < index else code if i == index else Err.RUNTIMEINCONSISTENCY)
                    for i in range(len(req.ops))
                ]
            results: list[MultiResult] = []
            for i, (op, sub) in enumerate(req.ops):
                try:
                    results.append(await self._multi_apply(session, store, op, sub))
                except (ZkError, MetadataStoreError) as err:
                    log.warning("multi failed at operation %d after the check passed (a racing writer): %s", i, err)
                    code = error_code(err)
                    return [
                        MultiResult(Op.ERROR, Err.OK if j < i else code if j == i else Err.RUNTIMEINCONSISTENCY)
                        for j in range(len(req.ops))
                    ]
            return results

        results: list[MultiResult] = await self._write(apply)
        return codec.encode_multi(results)

    async def _multi_check(self, store: MetadataStore, ops: list[tuple[int, Any]]) -> tuple[int, int] | None:
        """Run the ops against a view of the store; (index, error) of the first that would fail."""
        view: dict[str, _Node] = {}
        kids_of: dict[str, set[str]] = {}

        async def node(path: str) -> _Node:
            if path not in view:
                if path == paths.SEPARATOR:
                    view[path] = _Node(True)
                else:
                    got = await store.get(path)
                    view[path] = _Node(False) if got is None else _Node(True, got[1].version, got[1].ephemeral)
            return view[path]

        async def children(path: str) -> set[str]:
            if path not in kids_of:
                kids_of[path] = set(await store.get_children(path))
            return kids_of[path]

        for i, (op, sub) in enumerate(ops):
            try:
                if op in (Op.CREATE, Op.CREATE2, Op.CREATE_CONTAINER, Op.CREATE_TTL):
                    self._check_create(sub)
                    sequential = CreateMode.sequential(sub.flags)
                    parent = sub.path[:-1] if sub.path.endswith("/") else paths.parent(sub.path)
                    parent = parent or paths.SEPARATOR
                    if parent != paths.SEPARATOR:
                        p = await node(parent)
                        if not p.exists:
                            return i, Err.NONODE
                        if p.ephemeral:
                            return i, Err.NOCHILDRENFOREPHEMERALS
                    if not sequential:
                        n = await node(sub.path)
                        if n.exists:
                            return i, Err.NODEEXISTS
                        view[sub.path] = _Node(True, 0, CreateMode.ephemeral(sub.flags))
                        kids_of[sub.path] = set()
                        (await children(parent)).add(sub.path.rsplit("/", 1)[1])
                elif op == Op.DELETE:
                    check_path(sub.path)
                    self._no_writes_in_zookeeper_root(sub.path)
                    n = await node(sub.path)
                    if not n.exists:
                        return i, Err.NONODE
                    if sub.version != -1 and sub.version != n.version:
                        return i, Err.BADVERSION
                    if await children(sub.path):
                        return i, Err.NOTEMPTY
                    view[sub.path] = _Node(False)
                    parent = paths.parent(sub.path) or paths.SEPARATOR
                    (await children(parent)).discard(sub.path.rsplit("/", 1)[1])
                elif op == Op.SET_DATA:
                    check_path(sub.path)
                    self._no_writes_in_zookeeper_root(sub.path)
                    n = await node(sub.path)
                    if not n.exists:
                        return i, Err.NONODE
                    if sub.version != -1 and sub.version != n.version:
                        return i, Err.BADVERSION
                    n.version += 1
                elif op == Op.CHECK:
                    check_path(sub.path)
                    n = await node(sub.path)
                    if not n.exists:
                        return i, Err.NONODE
                    if sub.version != -1 and sub.version != n.version:
                        return i, Err.BADVERSION
            except (ZkError, MetadataStoreError) as err:
                return i, error_code(err)
        return None

    async def _multi_apply(self, session: ZkSession, store: MetadataStore, op: int, sub: Any) -> MultiResult:
        if op in (Op.CREATE, Op.CREATE2, Op.CREATE_CONTAINER, Op.CREATE_TTL):
            ephemeral = CreateMode.ephemeral(sub.flags)
            stat = await self._put_new(store, sub.path, sub.data, ephemeral, CreateMode.sequential(sub.flags))
            self.registry.record_put(session.client if ephemeral else None, sub.data, ephemeral, stat)
            if op == Op.CREATE:
                return MultiResult(Op.CREATE, 0, stat.path)
            zstat = to_zstat(stat, len(sub.data), 0, session.id if ephemeral else 0)
            return MultiResult(op, 0, (stat.path, zstat))
        if op == Op.DELETE:
            await self._delete_checked(store, sub.path, sub.version)
            return MultiResult(Op.DELETE)
        if op == Op.SET_DATA:
            stat = await self._set_checked(store, sub.path, sub.data, sub.version)
            kids = await store.get_children(sub.path)
            return MultiResult(Op.SET_DATA, 0, to_zstat(stat, len(sub.data), len(kids), self._owner(sub.path)))
        return MultiResult(Op.CHECK)
