"""A raw ZooKeeper client, written on the project's ZooKeeper codec
(``metashift.stores.zookeeper.wire``), for the protocol tests and the benchmarks.

The tests: it sends the requests kazoo never sends (addWatch, removeWatches, checkWatches,
getEphemerals, multiRead, getACL/setACL, whoAmI, getAllChildrenNumber, any opcode at all) and
reads the replies and watch events as bytes. Against a real ZooKeeper it connects without a
chroot (ZooKeeper's getEphemerals ignores the chroot) and puts ``prefix`` (the test's namespace)
before every path it sends and takes it off every path it receives, so one test reads the same
against ZooKeeper and through the agent.

The benchmarks: kazoo serializes every call through a thread and a queue, and cannot send more
than a few thousand requests a second whatever the server, so a row measured with it is kazoo's
ceiling as much as the server's. This client writes each request at once (``send``) on one
connection and matches answers to requests in order (ZooKeeper answers a session's requests in
the order sent), with no thread, so a row shows the server it talks to.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass

from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import Op, Reader, Writer, ZStat

#: A bound that turns a lost reply or event into a failure, never a timing.
WAIT = 20.0


class ZkError(RuntimeError):
    """A request that had to succeed got a ZooKeeper error code."""

    def __init__(self, what: str, err: int) -> None:
        super().__init__(f"{what}: ZooKeeper error {err}")
        self.err = err


@dataclass(frozen=True)
class Event:
    """A watch event: its type (``wire.EventType``) and path."""

    type: int
    path: str


@dataclass(frozen=True)
class Reply:
    """A reply: its error code, and a reader over its body (empty when ``err`` is not 0)."""

    xid: int
    err: int
    body: Reader


class RawZk:
    """One ZooKeeper session over one TCP connection; any number of requests in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, prefix: str) -> None:
        self.reader = reader
        self.writer = writer
        self.prefix = prefix
        self.session_id = 0
        self.passwd = bytes(16)
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self._pending: deque[tuple[int, asyncio.Future[Reply]]] = deque()
        self._xid = 0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, host: str, port: int, prefix: str = "", *, session_timeout_ms: int = 10_000,
                      session_id: int = 0, passwd: bytes = bytes(16)) -> RawZk:
        """A new session, or the re-attach of ``session_id`` with its ``passwd`` (``ConnectionError``
        when the server grants none: for a re-attach, the session expired)."""
        reader, writer = await asyncio.open_connection(host, port)
        zk = cls(reader, writer, prefix)
        writer.write(wire.frame(wire.ConnectRequest(0, 0, session_timeout_ms, session_id, passwd, False).encode()))
        response = wire.ConnectResponse.decode(await asyncio.wait_for(zk._packet(), WAIT))
        if response.timeout <= 0 or response.session_id == 0:
            writer.close()
            raise ConnectionError(f"no session from {host}:{port}: {response}")
        zk.session_id = response.session_id
        zk.passwd = response.passwd
        zk._task = asyncio.get_running_loop().create_task(zk._read())
        return zk

    async def close(self) -> None:
        if self.connected:
            with contextlib.suppress(Exception):
                await self.call(Op.CLOSE_SESSION, b"")
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        self.writer.close()

    async def close_connection(self) -> None:
        """Drop the connection without ending the session (as a client whose server went away)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        self.writer.close()

    async def _packet(self) -> bytes:
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        return await self.reader.readexactly(size)

    async def _read(self) -> None:
        try:
            while True:
                r = Reader(await self._packet())
                header = wire.ReplyHeader.read(r)
                if header.xid == wire.XID_WATCH_EVENT:
                    event_type, _state, path = r.int(), r.int(), r.string()
                    await self.events.put(Event(event_type, self.unprefix(path)))
                    continue
                if header.xid == wire.XID_PING:
                    continue
                xid, future = self._pending.popleft()
                assert header.xid == xid, f"reply for xid {header.xid}, expected {xid}"
                future.set_result(Reply(header.xid, header.err, r))
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            while self._pending:
                self._pending.popleft()[1].set_exception(ConnectionError(f"connection closed: {e!r}"))

    @property
    def connected(self) -> bool:
        return self._task is not None and not self._task.done()

    # ---- requests -------------------------------------------------------------------------------

    def path(self, path: str) -> str:
        return self.prefix + path if path != "/" or not self.prefix else self.prefix

    def unprefix(self, path: str) -> str:
        if self.prefix and path.startswith(self.prefix):
            return path[len(self.prefix):] or "/"
        return path

    def send(self, op: int, body: bytes, xid: int | None = None) -> asyncio.Future[Reply]:
        """Write one request now; its reply to come (in order: ZooKeeper answers a session's
        requests in the order sent). Any number may be in flight."""
        if not self.connected:
            raise ConnectionError("the connection is closed")
        if xid is None:
            self._xid += 1
            xid = self._xid
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending.append((xid, future))
        self.writer.write(wire.frame(Writer().int(xid).int(op).bytes() + body))
        return future

    async def call(self, op: int, body: bytes, xid: int | None = None) -> Reply:
        """Send one request; its reply (within ``WAIT`` seconds)."""
        return await asyncio.wait_for(self.send(op, body, xid), WAIT)

    async def ok(self, op: int, body: bytes, what: str) -> Reply:
        """``call``, its reply when it succeeded; ``ZkError`` naming ``what`` when it did not."""
        reply = await self.call(op, body)
        if reply.err != 0:
            raise ZkError(what, reply.err)
        return reply

    async def create(self, path: str, data: bytes = b"", flags: int = 0) -> str:
        """Create ``path`` (``ZkError`` when it cannot be); the path created."""
        body = Writer().string(self.path(path)).buffer(data).acls(wire.OPEN_ACL_UNSAFE).int(flags).bytes()
        reply = await self.ok(Op.CREATE, body, f"create {path}")
        return self.unprefix(reply.body.string())

    async def get(self, path: str) -> bytes:
        """``path``'s data (``ZkError`` when it cannot be read)."""
        reply = await self.ok(Op.GET_DATA, Writer().string(self.path(path)).bool(False).bytes(), f"get {path}")
        return reply.body.buffer() or b""

    async def set(self, path: str, data: bytes, version: int = -1) -> None:
        """Set ``path``'s data (``ZkError`` when it cannot be set)."""
        await self.ok(Op.SET_DATA, self._set_body(path, data, version), f"set {path}")

    async def set_data(self, path: str, data: bytes, version: int = -1) -> int:
        """Set ``path``'s data: the error code."""
        return (await self.call(Op.SET_DATA, self._set_body(path, data, version))).err

    def _set_body(self, path: str, data: bytes, version: int) -> bytes:
        return Writer().string(self.path(path)).buffer(data).int(version).bytes()

    async def delete(self, path: str, version: int = -1) -> int:
        return (await self.call(Op.DELETE, Writer().string(self.path(path)).int(version).bytes())).err

    async def get_data(self, path: str, watch: bool = False) -> Reply:
        return await self.call(Op.GET_DATA, Writer().string(self.path(path)).bool(watch).bytes())

    async def get_children(self, path: str, watch: bool = False) -> Reply:
        return await self.call(Op.GET_CHILDREN, Writer().string(self.path(path)).bool(watch).bytes())

    async def path_op(self, op: int, path: str) -> Reply:
        """A request whose body is a path alone (getACL, getEphemerals, getAllChildrenNumber)."""
        return await self.call(op, Writer().string(self.path(path)).bytes())

    async def add_watch(self, path: str, mode: int) -> Reply:
        return await self.call(Op.ADD_WATCH, Writer().string(self.path(path)).int(mode).bytes())

    async def watches_op(self, op: int, path: str, watcher_type: int) -> int:
        """removeWatches / checkWatches: the error code."""
        return (await self.call(op, Writer().string(self.path(path)).int(watcher_type).bytes())).err

    async def set_watches(self, relative_zxid: int, data: list[str], exist: list[str], child: list[str]) -> int:
        """setWatches, as a client re-attached to its session sends it first."""
        body = Writer().long(relative_zxid)
        for paths in (data, exist, child):
            body.strings([self.path(p) for p in paths])
        return (await self.call(Op.SET_WATCHES, body.bytes(), xid=wire.XID_SET_WATCHES)).err

    async def add_auth(self, scheme: str, auth: bytes) -> int:
        body = Writer().int(0).string(scheme).buffer(auth).bytes()
        return (await self.call(Op.AUTH, body, xid=wire.XID_AUTH)).err

    async def events_until(self, last: Event) -> list[Event]:
        """The watch events received, up to and including ``last`` (the test's marker: the
        store's notifications arrive in order, so every earlier event is in by then)."""
        got: list[Event] = []
        while not got or got[-1] != last:
            try:
                got.append(await asyncio.wait_for(self.events.get(), WAIT))
            except TimeoutError:
                raise AssertionError(f"no {last} within {WAIT}s; got {got}") from None
        return got


def read_stat(r: Reader) -> ZStat:
    """A Stat record read from a reply's body."""
    return ZStat.read(r)
