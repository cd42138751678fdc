"""The ZooKeeper front's TCP server: the listener, one asyncio task per client connection, and
each connection's handshake.

Per connection: a four-letter word in place of the first packet (``four_letter``) is answered and
the connection closes; otherwise the ConnectRequest comes first (a new session, or the re-attach
of a live one by id and password; an unknown or expired one is answered with timeout 0, which
clients read as "session expired"), then SASL if the client does it (``sasl``), then the
connection's requests (``request_loop``: each one
offered to the active store's backend, ``backends``, or served in order on the ordinary path,
``handlers``; answers in request order, ``replies``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.router import Router
from metashift.agent.core.sequence_floors import SequenceFloors
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper.backends import ActiveBackend
from metashift.agent.zookeeper.connection import ClientConnection, Totals, read_body, read_head
from metashift.agent.zookeeper.four_letter import WORDS, FrontFacts, LatencyStats, answer
from metashift.agent.zookeeper.handlers import Handlers, Zxid
from metashift.agent.zookeeper.passthrough import PassThroughBackend
from metashift.agent.zookeeper.pip454 import Pip454Flag
from metashift.agent.zookeeper.request_loop import RequestLoop
from metashift.agent.zookeeper.sasl import FrontSasl
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.agent.zookeeper.watches import Watches
from metashift.stores.zookeeper import ZooKeeperStore, wire

log = logging.getLogger(__name__)

#: How long a new connection may take to send its ConnectRequest, and a closing one to send its
#: last answers: a client that never finishes either holds no task for ever.
CONNECT_TIMEOUT = 10.0


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
        sasl: FrontSasl | None = None,
    ) -> None:
        self.host = host
        self.sasl = sasl or FrontSasl()
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
        self._live: set[ClientConnection] = set()
        self._totals = Totals()
        self._latency = LatencyStats()
        self._started = time.monotonic()

    def _pass_through(self, store: ZooKeeperStore) -> PassThroughBackend:
        return PassThroughBackend(store, self.gate, self.registry, self.sessions, self.watches, self.zxid,
                                  self.floors)

    @property
    def address(self) -> str:
        """``host:port`` the front listens on (the port bound, when 0 was asked for)."""
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
        """Accept connections (and start expiring silent sessions)."""
        assert self._server is not None
        self.sessions.start()
        await self._server.start_serving()
        log.info("zookeeper protocol served on %s", self.address)

    async def stop(self, *, hand_over: bool = False) -> None:
        """Stop listening, end every session (their ephemerals go) and every connection; with
        ``hand_over`` the sessions stay for the next process (``handover``)."""
        if self._server is not None:
            self._server.close()
        await self.sessions.shutdown(hand_over=hand_over)
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
        conn = ClientConnection(writer, self._totals)
        self._live.add(conn)
        session: ZkSession | None = None
        try:
            head = await asyncio.wait_for(read_head(reader), CONNECT_TIMEOUT)
            if head is None:
                return
            if head in WORDS:  # a four-letter word in place of the first packet's length
                writer.write(answer(head, self.facts()))
                await writer.drain()
                return
            connect = await asyncio.wait_for(read_body(reader, head), CONNECT_TIMEOUT)
            self._totals.received += 1
            session = self._connect(wire.ConnectRequest.decode(connect), conn, writer)
            if session is None:
                await writer.drain()
                return
            conn.facts.session_id = session.id
            loop = RequestLoop(session, conn, backend=self.backend, handlers=self.handlers, sessions=self.sessions,
                               zxid=self.zxid, totals=self._totals, latency=self._latency,
                               sasl=self.sasl.exchange())
            await loop.run(reader)
            await conn.replies.drained(CONNECT_TIMEOUT)  # closeSession's answer, behind those in flight
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, wire.DecodeError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
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

    def _connect(
        self, req: wire.ConnectRequest, conn: ClientConnection, writer: asyncio.StreamWriter
    ) -> ZkSession | None:
        """Open or re-attach the session a ConnectRequest asks for, and answer it (``None``: the
        session asked for expired or is unknown, and the client was told so)."""
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
