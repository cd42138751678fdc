"""A pipelined ZooKeeper client for the benchmarks, on the project's codec (``stores/zookeeper/wire``).

kazoo, the reference client of the tests, serializes every call through a thread and a queue:
on this machine it cannot send more than a few thousand requests a second whatever the server,
so a row measured with it is kazoo's ceiling as much as the server's. This client writes each
request at once on one connection and matches answers to requests in order (ZooKeeper answers a
session's requests in the order sent), with no thread, so a row shows the server it talks to.
"""

from __future__ import annotations

import asyncio
from collections import deque

from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import Op, Reader, Writer


class PipelinedZk:
    """One ZooKeeper session over one TCP connection; any number of calls in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._pending: deque[asyncio.Future[tuple[int, Reader]]] = deque()
        self._xid = 0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, host: str, port: int) -> PipelinedZk:
        reader, writer = await asyncio.open_connection(host, port)
        zk = cls(reader, writer)
        writer.write(wire.frame(wire.ConnectRequest(0, 0, 30_000, 0, bytes(16), False).encode()))
        response = wire.ConnectResponse.decode(await asyncio.wait_for(zk._packet(), 30))
        if response.session_id == 0:
            raise ConnectionError(f"no session from {host}:{port}")
        zk._task = asyncio.get_running_loop().create_task(zk._read())
        return zk

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            await self.call(Op.CLOSE_SESSION, b"")
            self._task.cancel()
        self._writer.close()

    async def _packet(self) -> bytes:
        size = int.from_bytes(await self._reader.readexactly(4), "big")
        return await self._reader.readexactly(size)

    async def _read(self) -> None:
        try:
            while True:
                r = Reader(await self._packet())
                header = wire.ReplyHeader.read(r)
                if header.xid in (wire.XID_WATCH_EVENT, wire.XID_PING):
                    continue
                self._pending.popleft().set_result((header.err, r))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            while self._pending:
                self._pending.popleft().set_exception(ConnectionError(f"connection closed: {e!r}"))

    def call(self, op: int, body: bytes) -> asyncio.Future[tuple[int, Reader]]:
        """Send one request now; its (error code, reader over the answer's body)."""
        self._xid += 1
        future: asyncio.Future[tuple[int, Reader]] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        self._writer.write(wire.frame(Writer().int(self._xid).int(op).bytes() + body))
        return future

    async def _ok(self, op: int, body: bytes, what: str) -> Reader:
        err, r = await self.call(op, body)
        if err != 0:
            raise RuntimeError(f"{what}: ZooKeeper error {err}")
        return r

    async def get(self, path: str) -> None:
        await self._ok(Op.GET_DATA, Writer().string(path).bool(False).bytes(), path)

    async def set(self, path: str, data: bytes) -> None:
        await self._ok(Op.SET_DATA, Writer().string(path).buffer(data).int(-1).bytes(), path)

    async def create(self, path: str, data: bytes) -> None:
        body = Writer().string(path).buffer(data).acls(wire.OPEN_ACL_UNSAFE).int(0).bytes()
        await self._ok(Op.CREATE, body, path)
