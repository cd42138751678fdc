"""ZooKeeper's single operations (get, getChildren, exists, create/setData, delete) and the
``multi`` request that carries a batch of writes.

Every request carries an explicit version and no per-path state is kept anywhere. Writes are
never re-sent after the connection dropped under them (the server may have applied them): they
fail with ``StoreUnavailable``. Reads are retried on the next connection until the call's
deadline. Every call is bounded by the URL's ``timeout`` (``calls.Calls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiozk import protocol

from .. import errors, paths
from ..ops import DeleteOp, GetResult, OpResult, PutOp
from ..ops import Op as StoreOp
from ..stat import Stat
from . import wire
from .calls import Calls
from .raw import RawRequest
from .wire import CreateMode, ZStat
from .wire.constants import JUTE_MAXBUFFER, Op

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


class Operations:
    """The store's single operations (get, getChildren, exists, put, delete) and the ``multi``
    of a batch of writes, each a call on the session (``Calls``)."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._namespace = calls.namespace

    # ---- reads ----------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult:
        calls = self._calls
        try:
            response = await calls.call(calls.read_request(Op.GET_DATA, path), path)
        except errors.NotFound:
            return None
        return (response.data or b""), calls.stat(path, response.stat)

    async def get_children(self, path: str) -> list[str]:
        full = self._namespace.full(path)
        try:
            response = await self._calls.call(protocol.GetChildrenRequest(path=full, watch=False), path)
        except errors.NotFound:
            return []
        return list(response.children)

    async def exists(self, path: str) -> bool:
        return await self.exists_stat(path) is not None

    async def exists_stat(self, path: str) -> ZStat | None:
        """ZooKeeper's Stat of ``path``, None when it does not exist."""
        calls = self._calls
        try:
            response = await calls.call(calls.read_request(Op.EXISTS, path), path)
        except errors.NotFound:
            return None
        stat: ZStat = response.stat
        return stat

    # ---- writes ---------------------------------------------------------------------------------

    async def put(self, path: str, value: bytes, expected_version: int | None, ephemeral: bool,
                  sequential: bool) -> Stat:
        calls = self._calls
        if sequential or expected_version == -1:
            return await self.create(path, value, ephemeral, sequential)
        if expected_version is not None:
            try:
                response = await calls.call(calls.set_data_request(path, value, expected_version), path)
            except errors.NotFound:
                raise errors.BadVersion(path, "node does not exist") from None
            return calls.stat(path, response.stat)
        # Blind write: update if it exists, else create; retry when racing a create or delete.
        for _ in range(10):
            try:
                response = await calls.call(calls.set_data_request(path, value, -1), path)
                return calls.stat(path, response.stat)
            except errors.NotFound:
                pass
            try:
                return await self.create(path, value, ephemeral, False)
            except errors.AlreadyExists:
                continue
        raise errors.BadVersion(path, "node kept being created and deleted concurrently")

    async def create(self, path: str, value: bytes, ephemeral: bool, sequential: bool) -> Stat:
        """Create ``path``, and its missing ancestors (empty, persistent) as Pulsar does."""
        calls = self._calls
        for attempt in range(5):
            try:
                response = await calls.call(calls.create2(path, value, ephemeral, sequential), path)
            except errors.NotFound:
                if attempt == 4:
                    raise errors.NotFound(paths.parent(path) or path, "parent kept vanishing") from None
                await self._ensure_parents(path)
                continue
            real = self._namespace.relative(response.path) or path
            return calls.stat(real, response.stat)
        raise AssertionError("unreachable")

    async def _ensure_parents(self, path: str) -> None:
        """Create the missing ancestors of ``path`` as empty persistent nodes, as Pulsar does.

        The creates are pipelined (one round trip; the server applies them in order); nodes
        another client creates or deletes meanwhile are tolerated, the caller retries.
        """
        calls = self._calls

        async def make(p: str) -> None:
            with contextlib.suppress(errors.AlreadyExists, errors.NotFound):
                await calls.call(calls.create2(p, b"", False, False), p)

        await asyncio.gather(*(make(p) for p in paths.ancestors(path)))

    async def delete(self, path: str, expected_version: int | None) -> None:
        version = -1 if expected_version is None else expected_version
        await self._calls.call(protocol.DeleteRequest(path=self._namespace.full(path), version=version), path)

    # ---- a batch of writes: one ``multi`` -------------------------------------------------------

    async def multi(self, ops: list[StoreOp]) -> list[OpResult] | None:
        """``ops`` (puts and deletes) in one ``multi``, which applies all or nothing: None when one operation failed
        (a bad version, a missing parent, a blind write of a missing node...), so that the batch
        runs them one by one and each gets the result it would get alone."""
        calls = self._calls
        records: list[tuple[int, Any]] = []
        for op in ops:
            if isinstance(op, PutOp):
                if op.sequential or op.expected_version == -1:
                    mode = CreateMode.of(op.ephemeral, op.sequential)
                    # no ACL of its own: ``multi_body`` gives every create the store's
                    records.append((Op.CREATE2, wire.CreateRequest(op.path, op.value, [], mode)))
                else:
                    version = -1 if op.expected_version is None else op.expected_version
                    records.append((Op.SET_DATA, wire.SetDataRequest(op.path, op.value, version)))
            else:
                assert isinstance(op, DeleteOp)
                version = -1 if op.expected_version is None else op.expected_version
                records.append((Op.DELETE, wire.DeleteRequest(op.path, version)))
        request = RawRequest(Op.MULTI, calls.rechroot.multi_body(records), True)  # a write: never re-sent
        try:
            response = await calls.call(request, ops[0].path)
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
                out.append(calls.stat(op.path, answer.stat))
            else:
                # Inside a multi the server answers a create without its Stat (like Pulsar, which
                # reports a batched create's Stat from what it knows): version 0, our clock.
                assert isinstance(op, PutOp)
                now = int(time.time() * 1000)
                real = self._namespace.relative(answer.path) or op.path
                out.append(Stat(real, 0, now, now, op.ephemeral, op.ephemeral,
                                calls.session.session_id if op.ephemeral else 0))
        return out
