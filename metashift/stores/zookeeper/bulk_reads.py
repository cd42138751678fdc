"""``BulkReads``: many getData and getChildren at once, for the copy's reads and a batch's gets.

They go in ``multiRead`` requests when the server has them (ZooKeeper 3.6+; ``fast_reads``: a
read inside one costs ZooKeeper a fraction of a request of its own), else pipelined one by one;
all sent at once, in one socket write, without a task or a timer each. A read that failed
otherwise (the connection went, ...) goes again on the ordinary path (``Calls.call``), which
retries reads and maps errors.
"""

from __future__ import annotations

import logging
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol

from .. import errors
from ..ops import OpResult
from .calls import Calls
from .fast_reads import MultiReadRequest
from .wire.constants import Err, Op

log = logging.getLogger(__name__)

#: Reads per multiRead: as many as keep its answer near ``_MULTI_READ_BYTES`` (learnt from the
#: sizes read so far), within these bounds.
_MAX_READS_PER_MULTI = 128
_MIN_READS_PER_MULTI = 8
_MULTI_READ_BYTES = 4 * 1024 * 1024


class BulkReads:
    """Reads many nodes' data or children at once: in multiReads, else pipelined."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self.multi_read: bool | None = None
        """Whether the server answers multiRead (None: not tried yet)."""
        self._read_size = 1024
        """Running estimate of a value's size, for the number of reads per multiRead."""

    async def reads(self, reads: list[tuple[int, str]]) -> list[Any]:
        """The answers of ``reads`` ((``Op.GET_DATA`` or ``Op.GET_CHILDREN``, path)), in order;
        ``None`` for a missing node."""
        if not reads:
            return []
        if not self._calls.url.multi_read or self.multi_read is False:
            return await self._pipelined(reads)
        if self.multi_read is None:
            # the first time, one small multiRead alone tells whether the server has it
            first = await self._multi_reads(reads[:_MIN_READS_PER_MULTI])
            self.multi_read = first is not None
            if first is None:
                log.info("%s answers no multiRead (ZooKeeper before 3.6?): bulk reads are pipelined",
                         self._calls.url)
                first = []
            return first + await self.reads(reads[len(first) :])
        got = await self._multi_reads(reads)
        return got if got is not None else await self._pipelined(reads)

    async def gets(self, paths: list[str]) -> list[OpResult]:
        """The ``GetOp`` results of ``paths`` (a batch's gets go as the bulk reads do)."""
        answers = await self.reads([(Op.GET_DATA, p) for p in paths])
        stat = self._calls.stat
        return [None if a is None else (a.data or b"", stat(p, a.stat)) for p, a in zip(paths, answers, strict=True)]

    def _request(self, opcode: int, path: str) -> Any:
        full = self._calls.namespace.full(path)
        if opcode == Op.GET_DATA:
            return protocol.GetDataRequest(path=full, watch=False)
        return protocol.GetChildrenRequest(path=full, watch=False)

    async def _multi_reads(self, reads: list[tuple[int, str]]) -> list[Any] | None:
        """``reads`` in multiRead requests; ``None`` when not one of them was answered (the
        server lacks multiRead, or the connection is down: the caller reads another way)."""
        if not reads:
            return []
        per = max(_MIN_READS_PER_MULTI, min(_MAX_READS_PER_MULTI, _MULTI_READ_BYTES // max(self._read_size, 1)))
        groups = [reads[i : i + per] for i in range(0, len(reads), per)]
        full = self._calls.namespace.full
        requests = [MultiReadRequest([(op, full(p)) for op, p in g]) for g in groups]
        futures = await self._calls.send_all(requests, reads[0][1])
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

    async def _pipelined(self, reads: list[tuple[int, str]]) -> list[Any]:
        """``reads`` as one request each, pipelined."""
        if not reads:
            return []
        futures = await self._calls.send_all([self._request(op, p) for op, p in reads], reads[0][1])
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
            return await self._calls.call(self._request(opcode, path), path)
        except errors.NotFound:
            return None
