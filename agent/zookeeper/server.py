"""The ZooKeeper front's TCP server: one asyncio connection per client, ZooKeeper's framing.

Per connection: the ConnectRequest first (a new session, or the re-attach of a live one by id and
password; an unknown or expired one is answered with timeout 0, which clients read as "session
expired"), then requests. Each is first offered to the active store's backend (``backend``,
chosen by ``backends``): in front of a ZooKeeper store, the requests ZooKeeper answers as they
are pass through to it at once (``passthrough``: many in flight on one connection are many in
flight to the store); the others take the ordinary path (``handlers``): a run of consecutive reads is served
concurrently, anything else one at a time, and once one request takes it every later one of the
connection does until it is answered, so a session sees its own writes. Replies go out in
request order (clients check the xid order), those ready together in one socket write
(``replies``). Pings (and addAuth) are answered at once, outside that order: a write held by the
gate never starves the session of its heartbeats, so it does not expire while writes are held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from functools import partial
from typing import Any

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.router import Router
from metashift.agent.core.sequence_floors import SequenceFloors
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper.backends import ActiveBackend
from metashift.agent.zookeeper.four_letter import WORDS, ConnectionFacts, FrontFacts, LatencyStats, answer
from metashift.agent.zookeeper.handlers import Handlers, Zxid
from metashift.agent.zookeeper.handlers.runs import RUN_MAX
from metashift.agent.zookeeper.passthrough import PassThroughBackend
from metashift.agent.zookeeper.pip454 import Pip454Flag
from metashift.agent.zookeeper.replies import Replies, Slot
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.agent.zookeeper.watches import Watches
from metashift.stores.aio import buffered_packet
from metashift.stores.zookeeper import ZooKeeperStore, wire
from metashift.stores.zookeeper.wire import Err, Op
from metashift.stores.zookeeper.wire.jute import HEADER

log = logging.getLogger(__name__)

#: Largest packet accepted (ZooKeeper's jute.maxbuffer is 1 MiB; a multi may carry more).
MAX_PACKET = 16 * 1024 * 1024
CONNECT_TIMEOUT = 10.0
#: A connection is dropped when nothing arrives for this fraction of its session timeout past
#: the timeout itself (clients ping every third of it).
_LENGTH = 4
_HEADER = HEADER


class _Totals:
    """Packets in and out of the whole front (the four-letter words report them)."""

    received = 0
    sent = 0


class _Conn:
    """One client connection: the send side shared by replies, pings and watch events."""

    def __init__(self, writer: asyncio.StreamWriter, totals: _Totals) -> None:
        self.writer = writer
        self.closed = False
        peer = writer.get_extra_info("peername")
        self.facts = ConnectionFacts(f"{peer[0]}:{peer[1]}" if peer else "?")
        self._totals = totals
        self.replies = Replies(self._send_many, self.close)
        self.ordinary = 0
        """Requests on the ordinary path not yet answered: while there are, later requests of the
        connection take it too (a session's requests keep their order)."""

    def send(self, data: bytes) -> None:
        """Send ``data`` (a ping's answer, a watch event) now, after the answers already made at
        the head of the line: the answer that set a watch goes out before its event."""
        self.replies.flush()
        self._send_many(data, 1)

    def _send_many(self, data: bytes, count: int) -> None:
        if not self.closed:
            self.writer.write(data)
            self.facts.sent += count
            self._totals.sent += count

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()


class ZooKeeperServer:
    """ZooKeeper's client protocol in front of the agent's router, gate and sessions."""

    def __init__(
        self,
        router: Router,
        gate: WriteGate,
        registry: SessionRegistry,
        *,
        host: str,
        port: int,
        min_timeout_ms: int = 4000,
        max_timeout_ms: int = 60000,
        ssl_context: ssl.SSLContext | None = None,
        pip454_flag: Pip454Flag | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.router, self.gate = router, gate
        self.watches = Watches(router)
        self.sessions = ZkSessions(
            registry, min_timeout_ms=min_timeout_ms, max_timeout_ms=max_timeout_ms,
            on_end=self.watches.drop_session,
        )
        # the zxid and the counters' floors are the front's, shared by both paths of a request
        self.zxid = Zxid()
        self.floors = SequenceFloors(router)
        self.registry = registry
        self.handlers = Handlers(router, gate, registry, self.sessions, self.watches, self.zxid, self.floors,
                                 pip454_flag)
        self.backend = ActiveBackend(router, self._pass_through)
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._live: set[_Conn] = set()
        self._totals = _Totals()
        self._latency = LatencyStats()
        self._started = time.monotonic()

    def _pass_through(self, store: ZooKeeperStore) -> PassThroughBackend:
        return PassThroughBackend(store, self.gate, self.registry, self.sessions, self.watches, self.zxid,
                                  self.floors)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, serve: bool = True) -> None:
        """Bind the port (``OSError`` when it cannot be), and serve unless ``serve=False`` (then
        ``serve()`` later: the agent binds before it registers, serves once it read the flag)."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, ssl=self.ssl_context, start_serving=False
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if serve:
            await self.serve()

    async def serve(self) -> None:
        assert self._server is not None
        self.sessions.start()
        await self._server.start_serving()
        log.info("zookeeper protocol served on %s", self.address)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self.sessions.shutdown()
        for task in list(self._conns):
            task.cancel()
        for task in list(self._conns):
            with contextlib.suppress(BaseException):
                await task
        self.watches.close()

    # ---- one connection -------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        conn = _Conn(writer, self._totals)
        self._live.add(conn)
        session: ZkSession | None = None
        worker: asyncio.Task[None] | None = None
        try:
            head = await asyncio.wait_for(_read_head(reader), CONNECT_TIMEOUT)
            if head is None:
                return
            if head in WORDS:  # a four-letter word in place of the first packet's length
                writer.write(answer(head, self.facts()))
                await writer.drain()
                return
            connect = await asyncio.wait_for(_read_body(reader, head), CONNECT_TIMEOUT)
            self._totals.received += 1
            session = self._connect(wire.ConnectRequest.decode(connect), conn, writer)
            if session is None:
                await writer.drain()
                return
            conn.facts.session_id = session.id
            queue: asyncio.Queue[tuple[wire.RequestHeader, Any, Slot] | None] = asyncio.Queue()
            worker = asyncio.create_task(self._work(session, conn, queue))
            backend = self.backend
            replies = conn.replies
            while True:
                data = buffered_packet(reader, MAX_PACKET)  # pipelined requests: usually already here
                if data is None:
                    # none more from this client for now: what it sent the store goes now, not
                    # at the end of the loop's turn (one request at a time, that turn is latency)
                    backend.current.flush()
                    data = await _read_packet(reader)
                if data is None or conn.closed:
                    break
                self._totals.received += 1
                conn.facts.received += 1
                session.client.touch()
                if len(data) < _HEADER.size:
                    log.warning("zookeeper session %#x: a packet of %d bytes; closing", session.id, len(data))
                    break
                xid, op = _HEADER.unpack_from(data)
                if op == Op.PING:
                    conn.send(wire.reply(wire.XID_PING, self.zxid.value))
                    continue
                slot = replies.take() if op != Op.AUTH else None
                if slot is not None and not conn.ordinary and backend.current.pass_through(
                        session, xid, op, data, partial(replies.fill, slot)):
                    continue
                try:
                    header, request = wire.decode_request(data)
                except wire.DecodeError as e:
                    log.warning("zookeeper session %#x: undecodable request (%s); closing", session.id, e)
                    break
                if slot is None:  # addAuth: answered at once, outside the order
                    err = self.handlers.add_auth(session, request)
                    conn.send(wire.reply(wire.XID_AUTH, self.zxid.value, err))
                    if err != Err.OK:
                        break
                else:
                    conn.facts.queued += 1
                    conn.ordinary += 1
                    queue.put_nowait((header, request, slot))
                    if header.type == Op.CLOSE_SESSION:
                        break
            queue.put_nowait(None)
            await worker
            await conn.replies.drained(CONNECT_TIMEOUT)  # closeSession's answer, behind those in flight
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, wire.DecodeError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            if worker is not None and not worker.done():
                worker.cancel()
                with contextlib.suppress(BaseException):
                    await worker
            if session is not None:
                self.sessions.detach(session, conn)
            conn.close()
            self._live.discard(conn)
            self._conns.discard(task)

    def facts(self) -> FrontFacts:
        """The front's figures, for a four-letter word."""
        sessions = list(self.sessions.by_id.values())
        return FrontFacts(
            host=self.host, port=self.port, tls=self.ssl_context is not None,
            min_timeout_ms=self.sessions.min_timeout_ms, max_timeout_ms=self.sessions.max_timeout_ms,
            zxid=self.zxid.value, connections=[c.facts for c in self._live if c.facts.session_id],
            sessions=len(sessions), ephemerals=sum(len(s.client.ephemerals) for s in sessions),
            watches=self.watches.count(), watched_paths=self.watches.paths(),
            received=self._totals.received, sent=self._totals.sent, latency=self._latency,
            started=self._started, active_store=self.router.active_name, store_url=str(self.router.active.url),
            write_gate_open=self.gate.is_open,
        )

    def _connect(self, req: wire.ConnectRequest, conn: _Conn, writer: asyncio.StreamWriter) -> ZkSession | None:
        peer = writer.get_extra_info("peername")
        read_only = None if req.read_only is None else False  # this server always accepts writes
        if req.session_id:
            session = self.sessions.find(req.session_id, req.passwd)
            if session is None:
                log.info("zookeeper session %#x from %s: expired or unknown", req.session_id, peer)
                conn.send(wire.frame(wire.ConnectResponse(0, 0, 0, bytes(16), read_only).encode()))
                return None
            log.info("zookeeper session %#x re-attached from %s", session.id, peer)
        else:
            session = self.sessions.open(req.timeout, str(peer[0]) if peer else "")
            log.info("zookeeper session %#x opened from %s (timeout %d ms)", session.id, peer, session.timeout_ms)
        conn.send(wire.frame(wire.ConnectResponse(0, session.timeout_ms, session.id, session.passwd,
                                                    read_only).encode()))
        self.sessions.attach(session, conn)
        return session

    async def _work(
        self, session: ZkSession, conn: _Conn, queue: asyncio.Queue[tuple[wire.RequestHeader, Any, Slot] | None]
    ) -> None:
        """Serve the requests of the ordinary path in order: a run of reads together, a run of
        writes the store can take in one round together (``WriteRuns``), anything else alone;
        each answer takes its place in the connection's line."""
        reads = Handlers.READS
        joins_run = self.handlers.joins_run
        while True:
            item = await queue.get()
            if item is None:
                return
            batch = [item]
            read_run = item[0].type in reads
            write_run = not read_run and joins_run(item[0].type, item[1])
            if read_run or write_run:
                while not queue.empty() and (read_run or len(batch) < RUN_MAX):
                    peek = queue._queue[0]  # type: ignore[attr-defined]
                    if peek is None or not (peek[0].type in reads if read_run else joins_run(peek[0].type, peek[1])):
                        break
                    batch.append(queue.get_nowait())  # type: ignore[arg-type]
            if write_run:  # a lone write too: its checks and its write in one round
                answers = await self._run(session, batch)
            elif len(batch) == 1:
                answers = [await self._one(session, item[0], item[1])]
            else:
                answers = list(await asyncio.gather(*(self._one(session, b[0], b[1]) for b in batch)))
            for (header, _request, slot), data in zip(batch, answers, strict=True):
                if header.type == Op.CLOSE_SESSION:
                    slot.close_after = True
                conn.replies.fill(slot, data)
            conn.facts.queued -= len(answers)
            conn.ordinary -= len(answers)
            if conn.closed:
                return
            with contextlib.suppress(ConnectionError):
                await conn.writer.drain()
            if item[0].type == Op.CLOSE_SESSION:
                return

    async def _run(self, session: ZkSession, batch: list[tuple[wire.RequestHeader, Any, Slot]]) -> list[bytes]:
        started = time.monotonic()
        answered = await self.handlers.handle_run(session, [(header.type, request) for header, request, _ in batch])
        elapsed_ms = (time.monotonic() - started) * 1000
        for _ in answered:
            self._latency.observe(elapsed_ms)
        return [wire.reply(header.xid, zxid, err, body)
                for (header, _, _), (err, body, zxid) in zip(batch, answered, strict=True)]

    async def _one(self, session: ZkSession, header: wire.RequestHeader, request: Any) -> bytes:
        if header.type == Op.CLOSE_SESSION:
            await self.sessions.close(session, "closed by the client")
            return wire.reply(header.xid, self.zxid.bump())
        started = time.monotonic()
        err, body, zxid = await self.handlers.handle(session, header.type, request)
        self._latency.observe((time.monotonic() - started) * 1000)
        return wire.reply(header.xid, zxid, err, body)


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """A packet's four length bytes (``None``: the connection ended)."""
    try:
        return await reader.readexactly(_LENGTH)
    except asyncio.IncompleteReadError:
        return None


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    size = int.from_bytes(head, "big", signed=True)
    if size < 0 or size > MAX_PACKET:
        raise wire.DecodeError(f"packet of {size} bytes")
    return await reader.readexactly(size)


async def _read_packet(reader: asyncio.StreamReader) -> bytes | None:
    head = await _read_head(reader)
    return None if head is None else await _read_body(reader, head)
