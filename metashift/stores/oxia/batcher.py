"""Gets and writes made side by side, sent as one ``Read`` or ``Write`` per shard.

Oxia takes many gets in one ``ReadRequest`` and many puts and deletes in one ``WriteRequest`` (each
with its own status; not a transaction), as its own clients batch them. A gRPC call costs both
sides more than the server's work for a small record, so the calls of one event-loop turn share a
request per shard (up to ``MAX_OPS`` operations and ``MAX_BYTES`` bytes). Nothing waits for a
request to fill: a lone call is sent in the turn it was made. Within one request the server
applies the puts before the deletes: calls of one turn on the same key have no order (callers that
need one await the first call before making the second, as they must for any store).
"""

from __future__ import annotations

import asyncio
from typing import Any

from metashift.stores.oxia.proto import client_pb2 as pb

from .connection import OxiaConnection, Shard

#: Operations, and bytes of keys and values, in one request.
MAX_OPS = 1000
MAX_BYTES = 8 * 1024 * 1024
_OVERHEAD = 32

Pending = tuple[str | None, Any, "asyncio.Future[Any]"]


class Batcher:
    """Sends the gets, puts and deletes of one event-loop turn together, a request per shard."""

    def __init__(self, conn: OxiaConnection) -> None:
        self._conn = conn
        self._pending: dict[tuple[str, int], list[Pending]] = {}
        self._shards: dict[int, Shard] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references

    async def get(self, path: str | None, shard: Shard, request: Any) -> Any:
        """The ``GetResponse`` of one ``GetRequest``."""
        return await self._add("read", path, shard, request)

    async def put(self, path: str | None, shard: Shard, request: Any) -> Any:
        """The ``PutResponse`` of one ``PutRequest``."""
        return await self._add("put", path, shard, request)

    async def delete(self, path: str | None, shard: Shard, request: Any) -> Any:
        """The ``DeleteResponse`` of one ``DeleteRequest``."""
        return await self._add("delete", path, shard, request)

    async def _add(self, kind: str, path: str | None, shard: Shard, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        # puts and deletes share a WriteRequest; gets go in a ReadRequest
        queue = self._pending.setdefault(("read" if kind == "read" else "write", shard.id), [])
        self._shards[shard.id] = shard
        queue.append((path, request, future))
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        loop = asyncio.get_running_loop()
        for (kind, shard_id), items in pending.items():
            shard = self._shards[shard_id]
            group: list[Pending] = []
            size = 0
            for item in items:
                n = item[1].ByteSize() + _OVERHEAD
                if group and (len(group) >= MAX_OPS or size + n > MAX_BYTES):
                    self._start(loop, kind, shard, group)
                    group, size = [], 0
                group.append(item)
                size += n
            if group:
                self._start(loop, kind, shard, group)

    def _start(self, loop: asyncio.AbstractEventLoop, kind: str, shard: Shard, group: list[Pending]) -> None:
        task = loop.create_task(self._send(kind, shard, group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, kind: str, shard: Shard, group: list[Pending]) -> None:
        # an error names the path when the request had one call: as the call alone would
        path = group[0][0] if len(group) == 1 else None
        try:
            if kind == "read":
                answers = await self._conn.streamed(
                    path, "Read", shard, pb.ReadRequest(shard=shard.id, gets=[r for _, r, _ in group]))
                results = [get for answer in answers for get in answer.gets]
            else:
                puts = [(f, r) for _, r, f in group if isinstance(r, pb.PutRequest)]
                deletes = [(f, r) for _, r, f in group if isinstance(r, pb.DeleteRequest)]
                request = pb.WriteRequest(shard=shard.id, puts=[r for _, r in puts], deletes=[r for _, r in deletes])
                response = await self._conn.unary(path, "Write", shard, request)
                by_future = dict(zip([f for f, _ in puts], response.puts, strict=True))
                by_future.update(zip([f for f, _ in deletes], response.deletes, strict=True))
                results = [by_future[f] for _, _, f in group]
        except BaseException as err:  # every call of the request fails with it
            for _, _, future in group:
                if not future.done():
                    future.set_exception(err)
            if not isinstance(err, Exception):
                raise
            return
        for (_, _, future), result in zip(group, results, strict=True):
            if not future.done():
                future.set_result(result)

    def cancel(self) -> None:
        """Cancel the requests in flight (the store is closing)."""
        for task in list(self._tasks):
            task.cancel()
