"""ZooKeeper's single operations (get, getChildren, exists, create/setData, delete) and the
``multi`` request that carries a batch of writes.

Every request carries an explicit version and no per-path state is kept anywhere. Writes are
never re-sent after the connection dropped under them (the server may have applied them): they
fail with ``StoreUnavailable``. Reads are retried on the next connection until the call's
deadline. Every call is bounded by the URL's ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiozk import protocol

from .. import errors, paths
from ..batching import BatchedStore, is_write, op_size
from ..ops import DeleteOp, GetResult, Op, OpResult, PutOp
from ..stat import Stat
from . import wire
from .errors import map_error
from .forward import RawRequest, Rechroot
from .protocol import ZKSession
from .wire import CreateMode, Writer
from .wire.constants import JUTE_MAXBUFFER, MAX_VERSION
from .wire.constants import Op as ZkOp

#: ZooKeeper's default ``jute.maxbuffer`` is for a whole packet (path, data, ACL, headers): a MiB
#: less 4 KiB is left for the value.
DEFAULT_MAX_VALUE_SIZE = JUTE_MAXBUFFER + 1 - 4096

#: Write batches go to the server as ``multi`` requests of at most this many operations and bytes.
MULTI_MAX_OPS = 128
MULTI_MAX_BYTES = 256 * 1024


def multi_request() -> Any:
    """An empty ``multi`` that is never re-sent on another connection."""
    request = protocol.TransactionRequest()
    request.writes_data = True  # aiozk marks multi as a read: it would re-send it
    return request


class ZooKeeperOperations(BatchedStore):
    """The ``MetadataStore`` primitives of the ZooKeeper store, on its session."""

    max_version = MAX_VERSION
    zookeeper_sequential_names = True
    batch_max_ops = MULTI_MAX_OPS
    batch_max_bytes = MULTI_MAX_BYTES

    _session: ZKSession
    _namespace: paths.Namespace
    _acl: list[Any]
    _rechroot: Rechroot
    _closed: bool

    # ---- one request ----------------------------------------------------------------------------

    async def _call(self, request: Any, path: str) -> Any:
        """Send one request, bounded by the call timeout; aiozk errors become store errors."""
        if self._closed:
            raise errors.StoreUnavailable("the store is closed", path)
        try:
            async with asyncio.timeout(self.url.call_timeout):
                return await self._session.send(request)
        except Exception as e:
            raise map_error(e, path, self.url) from e

    def _create_request(self, full: str, value: bytes, ephemeral: bool, sequential: bool) -> Any:
        """A create of ``full``, a server path (chroot included)."""
        request = protocol.Create2Request(path=full, data=value, acl=self._acl)
        request.set_flags(ephemeral=ephemeral, sequential=sequential, container=False)
        return request

    # getData, exists, setData, create2 and multi in the codec's wire form, the chroot and the ACL
    # put in by ``Rechroot`` as for the front's forwarded requests: aiozk's generic request parts
    # cost several µs per request to build (the answers are parsed by ``fast_reads``/``fast_writes``).

    def _read_request(self, opcode: int, path: str) -> RawRequest:
        """getData or exists of ``path``, without a watch."""
        return RawRequest(opcode, self._rechroot.path(path) + b"\0", False)

    def _set_data_request(self, path: str, value: bytes, version: int) -> RawRequest:
        return RawRequest(ZkOp.SET_DATA, self._rechroot.path(path) + Writer().buffer(value).int(version).bytes(), True)

    def _create2(self, path: str, value: bytes, ephemeral: bool, sequential: bool) -> RawRequest:
        """A create2 of ``path`` with the store's ACL."""
        body = self._rechroot.create_body(path, Writer().buffer(value).bytes(), CreateMode.of(ephemeral, sequential))
        return RawRequest(ZkOp.CREATE2, body, True)

    def _stat(self, path: str, zstat: Any) -> Stat:
        owner = zstat.ephemeral_owner
        return Stat(
            path=path,
            version=zstat.version,
            creation_timestamp=zstat.ctime,
            modification_timestamp=zstat.mtime,
            ephemeral=owner != 0,
            created_by_self=owner != 0 and owner == self._session.session_id,
            owner=owner,
        )

    # ---- reads ----------------------------------------------------------------------------------

    async def _get(self, path: str) -> GetResult:
        try:
            response = await self._call(self._read_request(ZkOp.GET_DATA, path), path)
        except errors.NotFound:
            return None
        return (response.data or b""), self._stat(path, response.stat)

    async def _get_children(self, path: str) -> list[str]:
        full = self._namespace.full(path)
        try:
            response = await self._call(protocol.GetChildrenRequest(path=full, watch=False), path)
        except errors.NotFound:
            return []
        return list(response.children)

    async def _exists(self, path: str) -> bool:
        return await self._exists_stat(path) is not None

    async def _exists_stat(self, path: str) -> Any:
        try:
            response = await self._call(self._read_request(ZkOp.EXISTS, path), path)
        except errors.NotFound:
            return None
        return response.stat

    # ---- writes ---------------------------------------------------------------------------------

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        if sequential or expected_version == -1:
            return await self._create(path, value, ephemeral, sequential)
        if expected_version is not None:
            try:
                response = await self._call(self._set_data_request(path, value, expected_version), path)
            except errors.NotFound:
                raise errors.BadVersion(path, "node does not exist") from None
            return self._stat(path, response.stat)
        # Blind write: update if it exists, else create; retry when racing a create or delete.
        for _ in range(10):
            try:
                response = await self._call(self._set_data_request(path, value, -1), path)
                return self._stat(path, response.stat)
            except errors.NotFound:
                pass
            try:
                return await self._create(path, value, ephemeral, False)
            except errors.AlreadyExists:
                continue
        raise errors.BadVersion(path, "node kept being created and deleted concurrently")

    async def _create(self, path: str, value: bytes, ephemeral: bool, sequential: bool) -> Stat:
        for attempt in range(5):
            try:
                response = await self._call(self._create2(path, value, ephemeral, sequential), path)
            except errors.NotFound:
                if attempt == 4:
                    raise errors.NotFound(paths.parent(path) or path, "parent kept vanishing") from None
                await self._ensure_parents(path)
                continue
            real = self._namespace.relative(response.path) or path
            return self._stat(real, response.stat)
        raise AssertionError("unreachable")

    async def _ensure_parents(self, path: str) -> None:
        """Create the missing ancestors of ``path`` as empty persistent nodes, as Pulsar does.

        The creates are pipelined (one round trip; the server applies them in order); nodes
        another client creates or deletes meanwhile are tolerated, the caller retries.
        """

        async def make(p: str) -> None:
            with contextlib.suppress(errors.AlreadyExists, errors.NotFound):
                await self._call(self._create2(p, b"", False, False), p)

        await asyncio.gather(*(make(p) for p in paths.ancestors(path)))

    async def _delete(self, path: str, expected_version: int | None) -> None:
        version = -1 if expected_version is None else expected_version
        await self._call(protocol.DeleteRequest(path=self._namespace.full(path), version=version), path)

    # ---- batches: reads are pipelined single calls, writes go in ``multi`` requests ---------------

    def _batch_kind(self, op: Op) -> str | None:
        return "multi" if is_write(op) else None

    def _batch_size(self, op: Op) -> int:
        return op_size(op, len(op.path))

    async def _send_batch(self, ops: list[Op]) -> list[OpResult] | None:
        """A ``multi`` applies all or nothing: when one operation fails (a bad version, a missing
        parent, a blind write of a missing node...) the batch runs them one by one, so that each
        gets the result it would get alone."""
        records: list[tuple[int, Any]] = []
        for op in ops:
            if isinstance(op, PutOp):
                if op.sequential or op.expected_version == -1:
                    mode = CreateMode.of(op.ephemeral, op.sequential)
                    # no ACL of its own: ``multi_body`` gives every create the store's
                    records.append((ZkOp.CREATE2, wire.CreateRequest(op.path, op.value, [], mode)))
                else:
                    version = -1 if op.expected_version is None else op.expected_version
                    records.append((ZkOp.SET_DATA, wire.SetDataRequest(op.path, op.value, version)))
            else:
                assert isinstance(op, DeleteOp)
                version = -1 if op.expected_version is None else op.expected_version
                records.append((ZkOp.DELETE, wire.DeleteRequest(op.path, version)))
        request = RawRequest(ZkOp.MULTI, self._rechroot.multi_body(records), True)  # a write: never re-sent
        try:
            response = await self._call(request, ops[0].path)
        except errors.StoreUnavailable:
            raise
        except errors.MetadataStoreError:
            return None
        answers = None if response is None else response.responses
        if answers is None or len(answers) != len(ops) or any(isinstance(a, Exception) for a in answers):
            return None
        out: list[OpResult] = []
        for op, answer in zip(ops, answers, strict=True):
            if isinstance(op, DeleteOp):
                out.append(None)
            elif getattr(answer, "stat", None) is not None:
                out.append(self._stat(op.path, answer.stat))
            else:
                # Inside a multi the server answers a create without its Stat (like Pulsar, which
                # reports a batched create's Stat from what it knows): version 0, our clock.
                assert isinstance(op, PutOp)
                now = int(time.time() * 1000)
                real = self._namespace.relative(answer.path) or op.path
                out.append(Stat(real, 0, now, now, op.ephemeral, op.ephemeral,
                                self._session.session_id if op.ephemeral else 0))
        return out
