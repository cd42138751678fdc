"""One connection's requests, once its session is settled (``server`` does the handshake).

Each request is first offered to the active store's backend (``backends.ActiveBackend``): in
front of a ZooKeeper store, what ZooKeeper answers as it is passes through at once (many in flight
on one connection are many in flight to the store). The others take the ordinary path
(``handlers``), served in order by the connection's worker: a run of consecutive reads
concurrently, a run of writes the store can take in one round together (``WriteRuns``), anything
else one at a time; once one request takes it every later one of the connection does until it is
answered, so a session sees its own writes. Answers go out in request order (``replies``). Pings
(and addAuth) are answered at once, outside that order: a write held by the gate never starves
the session of its heartbeats, so it does not expire while writes are held. So are SASL's
tokens (``sasl``), which also decide whether the connection is served at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial
from typing import Any

from metashift.agent.zookeeper.backends import ActiveBackend
from metashift.agent.zookeeper.connection import MAX_PACKET, ClientConnection, Totals, read_packet
from metashift.agent.zookeeper.four_letter import LatencyStats
from metashift.agent.zookeeper.handlers import Handlers, Zxid
from metashift.agent.zookeeper.handlers.runs import RUN_MAX
from metashift.agent.zookeeper.replies import Slot
from metashift.agent.zookeeper.sasl import SaslExchange
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.stores.aio import buffered_packet
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import Err, Op
from metashift.stores.zookeeper.wire.jute import HEADER

log = logging.getLogger(__name__)

#: A request on the ordinary path: its header, its record, its place in the connection's line.
Queued = tuple[wire.RequestHeader, Any, Slot]


class RequestLoop:
    """One connection's requests: read, passed through or queued, answered in order (the module's doc)."""

    def __init__(
        self, session: ZkSession, conn: ClientConnection, *, backend: ActiveBackend, handlers: Handlers,
        sessions: ZkSessions, zxid: Zxid, totals: Totals, latency: LatencyStats, sasl: SaslExchange,
    ) -> None:
        self.session = session
        self.sasl = sasl
        self.conn = conn
        self.backend = backend
        self.handlers = handlers
        self.sessions = sessions
        self.zxid = zxid
        self._totals = totals
        self._latency = latency
        self._queue: asyncio.Queue[Queued | None] = asyncio.Queue()

    async def run(self, reader: asyncio.StreamReader) -> None:
        """Serve requests until the client closes its session or goes, then its answers go out."""
        worker = asyncio.create_task(self._work())
        try:
            await self._read_all(reader)
            self._queue.put_nowait(None)
            await worker
        finally:
            if not worker.done():
                worker.cancel()
                with contextlib.suppress(BaseException):
                    await worker

    async def _read_all(self, reader: asyncio.StreamReader) -> None:
        """Read requests until the connection ends, closeSession, or a packet that closes it."""
        session, conn, backend, queue, sasl = self.session, self.conn, self.backend, self._queue, self.sasl
        replies = conn.replies
        while True:
            data = buffered_packet(reader, MAX_PACKET)  # pipelined requests: usually already here
            if data is None:
                # none more from this client for now: what it sent the store goes now, not
                # at the end of the loop's turn (one request at a time, that turn is latency)
                backend.current.flush()
                data = await read_packet(reader)
            if data is None or conn.closed:
                return
            self._totals.received += 1
            conn.facts.received += 1
            session.client.touch()
            if len(data) < HEADER.size:
                log.warning("zookeeper session %#x: a packet of %d bytes; closing", session.id, len(data))
                return
            xid, op = HEADER.unpack_from(data)
            if op == Op.SASL:  # answered at once: the client sends nothing else until it is done
                if not sasl.answer(session, conn, xid, data):
                    return
                continue
            if sasl.required and sasl.refuses(op):
                sasl.refuse(session, conn, xid, op)
                return
            if op == Op.PING:
                conn.send(wire.reply(wire.XID_PING, self.zxid.value))
                continue
            slot = replies.take() if op != Op.AUTH else None
            # the backend is looked up per request (the router may have switched since the last
            # one), never chosen per request: ``ActiveBackend`` swapped it at the switch
            if slot is not None and not conn.ordinary and backend.current.pass_through(
                    session, xid, op, data, partial(replies.fill, slot)):
                continue
            try:
                header, request = wire.decode_request(data)
            except wire.DecodeError as e:
                log.warning("zookeeper session %#x: undecodable request (%s); closing", session.id, e)
                return
            if slot is None:  # addAuth: answered at once, outside the order
                err = self.handlers.add_auth(session, request)
                conn.send(wire.reply(wire.XID_AUTH, self.zxid.value, err))
                if err != Err.OK:
                    return
            else:
                conn.facts.queued += 1
                conn.ordinary += 1
                queue.put_nowait((header, request, slot))
                if header.type == Op.CLOSE_SESSION:
                    return

    async def _work(self) -> None:
        """Serve the requests of the ordinary path in order: a run of reads together, a run of
        writes the store can take in one round together (``WriteRuns``), anything else alone;
        each answer takes its place in the connection's line."""
        conn, queue = self.conn, self._queue
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
                answers = await self._run(batch)
            elif len(batch) == 1:
                answers = [await self._one(item[0], item[1])]
            else:
                answers = list(await asyncio.gather(*(self._one(b[0], b[1]) for b in batch)))
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

    async def _run(self, batch: list[Queued]) -> list[bytes]:
        """A run of writes: their framed answers."""
        started = time.monotonic()
        requests = [(header.type, request) for header, request, _ in batch]
        answered = await self.handlers.handle_run(self.session, requests)
        elapsed_ms = (time.monotonic() - started) * 1000
        for _ in answered:
            self._latency.observe(elapsed_ms)
        return [wire.reply(header.xid, zxid, err, body)
                for (header, _, _), (err, body, zxid) in zip(batch, answered, strict=True)]

    async def _one(self, header: wire.RequestHeader, request: Any) -> bytes:
        """One request alone: its framed answer (closeSession ends the session)."""
        if header.type == Op.CLOSE_SESSION:
            await self.sessions.close(self.session, "closed by the client")
            return wire.reply(header.xid, self.zxid.bump())
        started = time.monotonic()
        err, body, zxid = await self.handlers.handle(self.session, header.type, request)
        self._latency.observe((time.monotonic() - started) * 1000)
        return wire.reply(header.xid, zxid, err, body)
