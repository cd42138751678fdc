"""The ZooKeeper store's bulk operations (the copy, its verification, sample data): a walk by
pipelined ``getChildren2``, restores and counter moves in pipelined ``multi`` requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol

from .. import errors, paths
from ..batching import OP_OVERHEAD, pack
from ..bulk import COUNTER_PROBE, BulkStore, NodeInfo, NodeRead, Restore, restore_by_puts
from ..ops import GetOp, OpResult
from ..ops import Op as StoreOp
from .counter_bumps import MULTI_SECONDS, BumpMulti, send_bumps
from .errors import map_error
from .fast_reads import MultiReadRequest
from .operations import MULTI_MAX_BYTES, MULTI_MAX_OPS, ZooKeeperOperations, multi_request
from .wire.constants import Err, Op

log = logging.getLogger(__name__)

#: getChildren2 calls in flight and per page of ``walk``; multis in flight.
_WALK_IN_FLIGHT = 512
_WALK_PAGE = 2000
_MULTIS_IN_FLIGHT = 8
#: Nodes per page of ``read_trees`` and ``read_many`` (their reads are sent together).
_READ_PAGE = 2000
#: Reads per multiRead: as many as keep its answer near ``_MULTI_READ_BYTES`` (learnt from the
#: sizes read so far), within these bounds.
_MAX_READS_PER_MULTI = 128
_MIN_READS_PER_MULTI = 8
_MULTI_READ_BYTES = 4 * 1024 * 1024


def _node(path: str, response: Any) -> NodeRead:
    stat = response.stat
    return NodeRead(path, response.data or b"", stat.version, stat.ephemeral_owner != 0)


class ZooKeeperBulk(ZooKeeperOperations, BulkStore):
    """The ``BulkStore`` operations of the ZooKeeper store."""

    needs_parents = True
    #: Whether the server answers multiRead (None: not tried yet).
    _multi_read: bool | None = None
    #: Running estimate of a value's size, for the number of reads per multiRead.
    _read_size: int = 1024

    async def _reads(self, reads: list[tuple[int, str]]) -> list[Any]:
        """The answers of ``reads`` ((``Op.GET_DATA`` or ``Op.GET_CHILDREN``, path)), in
        order; ``None`` for a missing node. In ``multiRead`` requests when the server has them
        (``fast_reads``: a read costs ZooKeeper a fraction of a request of its own), else
        pipelined one by one; all sent at once, in one socket write, without a task or a timer
        each. A read that failed otherwise (the connection went, ...) goes again on the
        ordinary path, which retries reads and maps errors."""
        if not reads:
            return []
        if not self.url.multi_read or self._multi_read is False:
            return await self._pipelined(reads)
        if self._multi_read is None:
            # the first time, one small multiRead alone tells whether the server has it
            first = await self._multi_reads(reads[:_MIN_READS_PER_MULTI])
            self._multi_read = first is not None
            if first is None:
                log.info("%s answers no multiRead (ZooKeeper before 3.6?): bulk reads are pipelined", self.url)
                first = []
            return first + await self._reads(reads[len(first) :])
        got = await self._multi_reads(reads)
        return got if got is not None else await self._pipelined(reads)

    # ---- a batch's gets go as the bulk reads do (``MetadataStore.batch``) ----------------------

    def _batch_kind(self, op: StoreOp) -> str | None:
        return "reads" if isinstance(op, GetOp) else super()._batch_kind(op)

    async def _send_batch(self, ops: list[StoreOp]) -> list[OpResult] | None:
        if not isinstance(ops[0], GetOp):
            return await super()._send_batch(ops)
        answers = await self._reads([(Op.GET_DATA, op.path) for op in ops])
        return [None if a is None else (a.data or b"", self._stat(op.path, a.stat))
                for op, a in zip(ops, answers, strict=True)]

    def _request(self, opcode: int, path: str) -> Any:
        full = self._namespace.full(path)
        if opcode == Op.GET_DATA:
            return protocol.GetDataRequest(path=full, watch=False)
        return protocol.GetChildrenRequest(path=full, watch=False)

    async def _multi_reads(self, reads: list[tuple[int, str]]) -> list[Any] | None:
        """``_reads`` in multiRead requests; ``None`` when not one of them was answered (the
        server lacks multiRead, or the connection is down: the caller reads another way)."""
        if not reads:
            return []
        per = max(_MIN_READS_PER_MULTI, min(_MAX_READS_PER_MULTI, _MULTI_READ_BYTES // max(self._read_size, 1)))
        groups = [reads[i : i + per] for i in range(0, len(reads), per)]
        full = self._namespace.full
        futures = await self._send_all([MultiReadRequest([(op, full(p)) for op, p in g]) for g in groups], reads[0][1])
        out: list[Any] = []
        again: list[int] = []
        answered = False
        data_bytes = data_reads = 0
        for group, f in zip(groups, futures, strict=True):
            if f is None or f.cancelled() or f.exception() is not None:
                again.extend(range(len(out), len(out) + len(group)))
                out.extend([None] * len(group))
                continue
            answered = True
            _zxid, answers = f.result()
            for read, answer in zip(group, answers, strict=True):
                if isinstance(answer, int):
                    if answer != Err.NONODE:
                        again.append(len(out))
                    out.append(None)
                else:
                    out.append(answer)
                    if read[0] == Op.GET_DATA:
                        data_reads += 1
                        data_bytes += answer.stat.data_length
        if not answered:
            return None
        if data_reads:  # how many reads fit a multiRead: its answer stays a few MB
            self._read_size = (self._read_size + data_bytes // data_reads) // 2
        if again:
            for i, answer in zip(again, await self._pipelined([reads[i] for i in again]), strict=True):
                out[i] = answer
        return out

    async def _send_all(self, requests: list[Any], path: str) -> list[asyncio.Future[Any] | None]:
        """Send ``requests`` back to back on the connection and wait until all are answered,
        within the call timeout; a future each, ``None`` where the session was not connected."""
        futures = [self._session.send_now(r) for r in requests]
        pending = [f for f in futures if f is not None]
        if pending:
            try:
                async with asyncio.timeout(self.url.call_timeout):
                    await asyncio.wait(pending)
            except TimeoutError as e:
                raise map_error(e, path, self.url) from e
        return futures

    async def _pipelined(self, reads: list[tuple[int, str]]) -> list[Any]:
        """``_reads`` as one request each, pipelined."""
        if not reads:
            return []
        futures = await self._send_all([self._request(op, p) for op, p in reads], reads[0][1])
        out: list[Any] = []
        for (op, path), f in zip(reads, futures, strict=True):
            if f is not None and not f.cancelled():
                error = f.exception()
                if error is None:
                    _zxid, response = f.result()
                    out.append(response)
                    continue
                if isinstance(error, zk_exc.NoNode):
                    out.append(None)
                    continue
            out.append(await self._ordinary(op, path))
        return out

    async def _ordinary(self, opcode: int, path: str) -> Any:
        """One read on the ordinary path (retried, errors mapped); ``None`` for a missing node."""
        try:
            return await self._call(self._request(opcode, path), path)
        except errors.NotFound:
            return None

    async def read_many(self, items: Sequence[str]) -> list[NodeRead | None]:
        out: list[NodeRead | None] = []
        for start in range(0, len(items), _READ_PAGE):
            chunk = items[start : start + _READ_PAGE]
            for path, r in zip(chunk, await self._reads([(Op.GET_DATA, p) for p in chunk]), strict=True):
                out.append(None if r is None else _node(path, r))
        return out

    async def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        """Level by level: the getData of every node of the level (its Stat says how many
        children it has), then the getChildren of the nodes that have some; the next page is
        read while the caller works on this one."""

        async def read(chunk: list[str]) -> tuple[list[NodeRead], list[str]]:
            got = await self._reads([(Op.GET_DATA, p) for p in chunk])
            page: list[NodeRead] = []
            parents: list[str] = []
            for path, r in zip(chunk, got, strict=True):
                if r is None:
                    continue
                if path != paths.SEPARATOR:
                    page.append(_node(path, r))
                if r.stat.num_children:
                    parents.append(path)
            kids = await self._reads([(Op.GET_CHILDREN, p) for p in parents])
            below: list[str] = []
            for path, k in zip(parents, kids, strict=True):
                if k is not None:
                    below.extend(c for c in (paths.join(path, name) for name in sorted(k.children)) if c not in prune)
            return page, below

        frontier = [r for r in roots if r not in prune]
        while frontier:
            chunks = [frontier[i : i + _READ_PAGE] for i in range(0, len(frontier), _READ_PAGE)]
            next_frontier: list[str] = []
            ahead = asyncio.ensure_future(read(chunks[0]))
            try:
                for k in range(len(chunks)):
                    page, below = await ahead
                    if k + 1 < len(chunks):
                        ahead = asyncio.ensure_future(read(chunks[k + 1]))
                    next_frontier.extend(below)
                    if page:
                        yield page
            finally:
                if not ahead.done():
                    ahead.cancel()
            frontier = next_frontier

    async def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        """Breadth first with pipelined ``getChildren2``: one call per node gives both its
        children and its own Stat (version, data length, ephemeral owner), so nothing is read."""
        sem = asyncio.Semaphore(_WALK_IN_FLIGHT)

        async def children2(path: str) -> Any:
            async with sem:
                request = protocol.GetChildren2Request(path=self._namespace.full(path), watch=False)
                try:
                    return await self._call(request, path)
                except errors.NotFound:
                    return None

        frontier = [root]
        while frontier:
            next_frontier: list[str] = []
            for start in range(0, len(frontier), _WALK_PAGE):
                chunk = frontier[start : start + _WALK_PAGE]
                page: list[NodeInfo] = []
                for path, resp in zip(chunk, await asyncio.gather(*(children2(p) for p in chunk)), strict=True):
                    if resp is None:
                        continue
                    if path != root:
                        stat = resp.stat
                        owner = stat.ephemeral_owner
                        page.append(NodeInfo(path, stat.version, stat.data_length, owner != 0, owner,
                                             stat.mzxid))
                    for name in resp.children:
                        child = paths.join(path, name)
                        if child not in prune:
                            next_frontier.append(child)
                if page:
                    yield page
            frontier = next_frontier

    async def _restore_many(self, items: Sequence[Restore]) -> list[int | errors.MetadataStoreError]:
        """Each node's chain (create, then setData at each version, empty values until the last
        one) goes in ``multi`` requests: ZooKeeper applies the same path many times in one
        multi. Short chains share multis, pipelined; a chain longer than one multi is sent multi
        after multi. A multi that fails (a parent missing, a version moved) changed nothing: its
        nodes are read again and finished by single puts, which name the culprits."""
        results: list[int | errors.MetadataStoreError] = [0] * len(items)
        retry: set[int] = set()
        sem = asyncio.Semaphore(_MULTIS_IN_FLIGHT)

        def chain(item: Restore) -> list[tuple[Any, int]]:
            full = self._namespace.full(item.path)
            out: list[tuple[Any, int]] = []
            version = item.current
            if version == -1:
                value = item.value if item.version == 0 else b""
                out.append((self._create_request(full, value, False, False), len(full) + len(value) + OP_OVERHEAD))
                version = 0
            while version < item.version:
                value = item.value if version + 1 == item.version else b""
                request = protocol.SetDataRequest(path=full, data=value, version=version)
                out.append((request, len(full) + len(value) + OP_OVERHEAD))
                version += 1
            return out

        async def send(requests: list[Any], owners: list[int]) -> bool:
            multi = multi_request()
            for r in requests:
                multi.add(r)
            async with sem:
                try:
                    response = await self._call(multi, items[owners[0]].path)
                except errors.StoreUnavailable as e:
                    for i in owners:
                        results[i] = e
                    return False
                except errors.MetadataStoreError:
                    response = None
            answers = None if response is None else response.responses
            if answers is None or len(answers) != len(requests) or any(isinstance(a, Exception) for a in answers):
                retry.update(i for i in owners if not isinstance(results[i], errors.MetadataStoreError))
                return False
            return True

        async def long_chain(i: int, ops: list[tuple[Any, int]]) -> None:
            for group in pack([(1, n) for _, n in ops], MULTI_MAX_OPS, MULTI_MAX_BYTES):
                if not await send([ops[k][0] for k in group], [i]):
                    return

        todo = [i for i, item in enumerate(items) if item.current < item.version]
        chains = [chain(items[i]) for i in todo]
        jobs: list[Any] = []
        for group in pack([(len(c), sum(n for _, n in c)) for c in chains], MULTI_MAX_OPS, MULTI_MAX_BYTES):
            if len(group) == 1 and (
                len(chains[group[0]]) > MULTI_MAX_OPS or sum(n for _, n in chains[group[0]]) > MULTI_MAX_BYTES
            ):
                jobs.append(long_chain(todo[group[0]], chains[group[0]]))
            else:
                jobs.append(send([r for k in group for r, _ in chains[k]], [todo[k] for k in group]))
        await asyncio.gather(*jobs)
        if retry:
            order = sorted(retry)
            fresh = await self.batch([GetOp(items[i].path) for i in order])
            again: list[Restore] = []
            for i, got in zip(order, fresh, strict=True):
                item = items[i]
                current = got[1].version if isinstance(got, tuple) else -1
                if isinstance(got, errors.MetadataStoreError):
                    results[i] = got
                elif current > item.version:
                    results[i] = errors.BadVersion(item.path, f"version {current} is past {item.version}")
                else:
                    again.append(Restore(item.path, item.value, item.version, current))
            redone = await restore_by_puts(self, again)
            by_path = {r.path: res for r, res in zip(again, redone, strict=True)}
            for i in order:
                if items[i].path in by_path:
                    res = by_path[items[i].path]
                    ok = not isinstance(res, errors.MetadataStoreError)
                    results[i] = items[i].version - items[i].current if ok else res
        for i, item in enumerate(items):
            if results[i] == 0 and item.current < item.version:
                results[i] = item.version - item.current
        return results

    async def position_of(self, path: str) -> int | None:
        """The node's mzxid: the zxid of the transaction that last wrote it."""
        zstat = await self._exists_stat(paths.validate(path))
        return None if zstat is None else int(zstat.mzxid)

    async def children_version(self, path: str) -> int | None:
        """The ``cversion`` of ``path`` (its count of child creations and deletions), or ``None``
        when it does not exist. It bounds the next sequential suffix from above: ZooKeeper names
        a sequential child after the count of creations only (see ``sequence_counter``)."""
        zstat = await self._exists_stat(paths.validate(path))
        return None if zstat is None else int(zstat.cversion)

    async def sequence_counter(self, parent: str) -> int:
        """ZooKeeper names a sequential child after the parent's count of child *creations*
        (its internal cversion). The cversion it reports counts creations and deletions
        (``2 * creations - live children``), so the count is ``(cversion + children) / 2``."""
        zstat = await self._exists_stat(paths.validate(parent))
        if zstat is None:
            return 0
        return (int(zstat.cversion) + int(zstat.num_children)) // 2

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """Every child creation moves the counter by one: (create, delete) pairs of a throw-away
        child in multis serialized once and sent many at a time (``counter_bumps``), until it
        is reached. The parent is created (empty) when missing."""
        paths.validate(parent)
        counter = await self.sequence_counter(parent)
        if counter >= at_least:
            return 0
        if not await self._exists(parent):
            await self.put(parent, b"")
            counter = await self.sequence_counter(parent)
        probe = self._namespace.full(paths.join(parent, COUNTER_PROBE))
        steps = at_least - counter
        timeout = max(self.url.call_timeout, MULTI_SECONDS)

        async def send(request: BumpMulti) -> int:
            future = self._session.send_now(request)
            if future is None:
                raise errors.StoreUnavailable("the session is not connected", parent)
            try:
                async with asyncio.timeout(timeout):
                    _zxid, code = await future
            except (TimeoutError, OSError, zk_exc.ConnectError, zk_exc.ConnectionLoss, zk_exc.SessionExpired) as e:
                raise map_error(e, parent, self.url) from e
            except zk_exc.ZKError as e:  # the whole multi refused (an error in the answer's header)
                return int(getattr(e, "error_code", -1) or -1)
            return int(code)

        try:
            await send_bumps(send, probe, self._acl, steps)
        except RuntimeError as e:
            raise errors.MetadataStoreError(f"could not advance the sequence counter: {e}", parent) from None
        return 2 * steps
