"""The store's connection to one ZooKeeper server: aiozk's ``Connection`` with the request path
and the answer path the store needs (``ZKConnection``), and ``discard``.

- The requests sent in one turn of the event loop go out in one socket write (aiozk wrote each
  on its own, one system call per request: the hot spot of pipelined bulk reads); ``flush``
  writes them at once for a caller that knows no more are coming.
- Requests already in wire form (``forward.RawRequest``) are sent as they are, and their answers
  handed back as ZooKeeper sent them (``RawReply``).
- Answers are read whole (one timer, none when the bytes are already buffered), and the common
  ones parsed by ``struct`` (``fast_reads``, ``fast_writes``, ``counter_bumps``).
- With ``sync_xid`` (``StoreURL.sync_reads``: an ensemble), the reads of one turn follow a
  ``sync`` queued in front of the first of them: the server holds a session's later requests
  behind its sync, so that each read reflects every write acknowledged anywhere before it was
  asked for, at the cost of the leader's round trip in its latency (no round trip more for the
  caller: the sync and the reads go out in one write).
- A connection that ends tells its session at once (aiozk waited for the next missed heartbeat).
- With a TLS context (``tls``), the socket is TLS to the host as named (its certificate checked
  against that name), and aiozk's ``srvr`` probe on a connection of its own is skipped: a TLS
  handshake more per connection, for a read-only flag the store needs not (it asks for a
  read-write session, which a read-only server refuses in the handshake itself).

The connection knows its session only by the two callbacks it is given (a watch event came, the
connection ended), so that the session's module (``protocol``) imports this one and not back.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Callable
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.connection import Connection, size_struct

from metashift.stores.aio import buffered_packet

from . import fast_writes
from .counter_bumps import OPCODE_BUMPS, bump_error
from .fast_reads import get_children2_response, get_children_response, get_data_response, multi_read_response
from .raw import Pending, RawReply, RawRequest
from .wire.constants import XID_WATCH_EVENT, Op
from .wire.jute import INT as SIZE
from .wire.jute import REPLY as REPLY_HEADER

log = logging.getLogger(__name__)

#: The requests that read (a sync goes in front of a turn's first: ``ZKConnection._sync_first``).
_READS = frozenset({Op.GET_DATA, Op.EXISTS, Op.GET_CHILDREN, Op.GET_CHILDREN2, Op.MULTI_READ, Op.GET_ACL})


def _ignore_outcome(f: asyncio.Future[Any]) -> None:
    if not f.cancelled():
        f.exception()


class ZKConnection(Connection):
    """A connection that reports its own end instead of waiting for the next missed heartbeat,
    and that writes the requests sent in one turn of the event loop with one socket write
    (aiozk: one write, one system call, per request: the hot spot of pipelined bulk reads)."""

    reader: Any
    writer: Any

    def __init__(
        self,
        host: str,
        port: int,
        read_timeout: float,
        on_watch_event: Callable[[Any], None],
        on_dropped: Callable[[ZKConnection], None],
        tls: ssl.SSLContext | None = None,
        sync_xid: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(host, port, watch_handler=on_watch_event, read_timeout=read_timeout)
        self._on_dropped = on_dropped
        self.tls = tls
        self._sync_xid = sync_xid
        """The session's next xid, for the sync in front of a turn's reads (``None``: no sync)."""
        self._synced = False
        """A sync is queued in this turn's write: the turn's later reads follow it."""
        self._out: list[bytes] = []
        #: xids of the forwarded requests (``forward.RawRequest``) awaiting their answer
        self._raw: set[int] = set()
        #: The highest zxid an answer on this connection carried, whatever path its request took
        #: (aiozk's ``send`` remembers the zxid of its own answers only, not of the forwarded and
        #: pipelined ones): the session sends it when it moves to another server (``seen_zxid``).
        self.last_zxid = 0

    async def connect(self) -> None:
        if self.tls is None:
            await super().connect()
            return
        self.start_read_only = False
        async with asyncio.timeout(self.read_timeout):
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.tls, server_hostname=self.host,
                ssl_handshake_timeout=self.read_timeout)

    def send_raw(self, request: RawRequest, xid: int, pending: Pending) -> None:
        """Send a request already in wire form; ``pending`` gets its ``RawReply`` (or the error
        that ended the connection) from the read loop."""
        payload = request.serialize(xid)
        if request.opcode in _READS:
            self._sync_first()
        self.opcode_xref[xid] = request.opcode
        self.pending[xid] = pending
        self._raw.add(xid)
        self._queue(payload)

    def send(self, request: Any, xid: int | None = None) -> asyncio.Future[Any]:
        f: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.closing:
            f.set_exception(zk_exc.ConnectError(self.host, self.port))
            return f
        if request.special_xid:
            xid = request.special_xid
        payload = request.serialize(xid)
        if request.opcode in _READS:
            self._sync_first()
        self.opcode_xref[xid] = request.opcode
        if xid in protocol.SPECIAL_XIDS:
            self.pending_specials[xid].append(f)
        else:
            self.pending[xid] = f
        self._queue(payload)
        return f

    def _sync_first(self) -> None:
        """A sync queued ahead of this turn's first read (its xid the session's next: answers are
        matched by xid, and the server answers a session's requests in the order they came)."""
        if self._sync_xid is None or self._synced:
            return
        self._synced = True
        xid = self._sync_xid()
        f: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        f.add_done_callback(_ignore_outcome)  # the reads behind it fail the same way if it fails
        request = protocol.SyncRequest(path="/")
        self.opcode_xref[xid] = request.opcode
        self.pending[xid] = f
        self._queue(request.serialize(xid))

    def _queue(self, payload: bytes) -> None:
        """``payload`` framed, to go out with the others of this turn (the first schedules the write)."""
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(size_struct.pack(len(payload)))
        self._out.append(payload)

    def flush(self) -> None:
        """Write the requests queued in this turn now, not at its end."""
        if self._out:
            self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        self._synced = False
        if not out or self.writer is None:
            return
        try:
            self.writer.write(b"".join(out))
        except Exception:
            log.exception("Exception during write")
            self.abort()

    async def read_response(self, initial_connect: bool = False) -> Any:
        """aiozk's, reading header and payload at once (one timer, none when the bytes are
        already buffered: pipelined answers usually are), with getData, getChildren and
        getChildren2 and multiRead answers parsed by ``struct`` instead of aiozk's generic parts (the hot spot of
        bulk reads; ``fast_reads``), writes' answers and notifications likewise (``fast_writes``), and
        counter bumps only scanned for a failure (``counter_bumps``)."""
        if initial_connect or self.pending_specials[protocol.CLOSE_XID]:
            return await super().read_response(initial_connect)
        reader = self.reader
        raw = buffered_packet(reader)  # pipelined answers: usually already here
        if raw is None:
            try:
                (size,) = SIZE.unpack(await reader.readexactly(4))
                if len(reader._buffer) >= size:  # already here: no timer
                    raw = await reader.readexactly(size)
                else:
                    async with asyncio.timeout(self.read_timeout):
                        raw = await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                raise ConnectionAbortedError from None
            except TimeoutError:
                raise zk_exc.UnfinishedRead from None
        xid, zxid, error_code = REPLY_HEADER.unpack_from(raw)
        if zxid > self.last_zxid and xid != XID_WATCH_EVENT:
            self.last_zxid = zxid
        if xid in self._raw:  # a forwarded request: its answer as ZooKeeper sent it
            self._raw.discard(xid)
            self.opcode_xref.pop(xid, None)
            return xid, zxid, RawReply(error_code, raw[REPLY_HEADER.size :])
        if error_code:
            self.opcode_xref.pop(xid)
            return xid, zxid, zk_exc.get_response_error(error_code)
        if xid == XID_WATCH_EVENT:
            return xid, zxid, fast_writes.watch_event(raw, REPLY_HEADER.size)
        opcode = self.opcode_xref.pop(xid)
        if opcode == Op.GET_DATA:
            return xid, zxid, get_data_response(raw, REPLY_HEADER.size)[0]
        if opcode == Op.GET_CHILDREN:
            return xid, zxid, get_children_response(raw, REPLY_HEADER.size)[0]
        if opcode == Op.GET_CHILDREN2:
            return xid, zxid, get_children2_response(raw, REPLY_HEADER.size)
        if opcode == OPCODE_BUMPS:
            return xid, zxid, bump_error(raw, REPLY_HEADER.size)
        if opcode == Op.MULTI_READ:
            try:
                return xid, zxid, multi_read_response(raw, REPLY_HEADER.size)
            except (struct.error, ValueError, UnicodeDecodeError) as e:  # not what ZooKeeper 3.6+ answers
                return xid, zxid, zk_exc.UnfinishedRead(f"malformed multiRead answer: {e}")
        try:
            parsed = fast_writes.answer(opcode, raw, REPLY_HEADER.size)
        except (struct.error, ValueError, UnicodeDecodeError) as e:
            return xid, zxid, zk_exc.UnfinishedRead(f"malformed answer to opcode {opcode}: {e}")
        if parsed is not None:
            return xid, zxid, parsed
        return xid, zxid, protocol.response_xref[opcode].deserialize(raw[REPLY_HEADER.size :])

    async def _read(self, size: int = -1) -> bytes:
        # aiozk reads in a loop of wait_for()s, a new task per chunk: the hot spot of pipelined reads.
        try:
            async with asyncio.timeout(self.read_timeout):
                data: bytes = await self.reader.readexactly(size)
                return data
        except asyncio.IncompleteReadError:
            raise ConnectionAbortedError from None
        except TimeoutError:
            raise zk_exc.UnfinishedRead from None

    async def read_loop(self) -> None:
        await super().read_loop()
        if not self.closing:
            self._on_dropped(self)


def discard(conn: Any) -> None:
    """Close a connection now: pending requests fail with ConnectError, the socket goes."""
    conn.closing = True
    if conn.read_loop_task is not None and not conn.read_loop_task.done():
        conn.read_loop_task.cancel()
    if conn.pending_count():
        conn.abort()
    if conn.writer is not None:
        conn.writer.close()
