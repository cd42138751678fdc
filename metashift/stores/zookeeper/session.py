"""The store's ZooKeeper session: aiozk's, made fit for a long-lived service.

The store uses aiozk's request/response classes and its ``Session`` (state machine, heartbeat,
``send``), but not ``ZKClient``: the client's stat cache grows forever and its
``set_data``/``delete`` silently use cached versions. What is replaced here:

- ``ZKSession``: server search backs off to at most one second (aiozk: up to 60 s), a failed
  handshake keeps the session id (aiozk threw the session away, losing every ephemeral), a
  connection that drops is noticed at once (aiozk noticed only at the next missed heartbeat),
  watch events do not grow aiozk's callback table, and the digest credentials are re-sent on every
  new connection (ZooKeeper ties authentication to the connection, not the session).
- ``RetryPolicy``: writes are never re-sent after the connection dropped under them (the server
  may have applied them); reads are retried on the next connection.
- ``ZKSession.shut``: the end of the session (ephemerals gone at once), of its tasks and timers.
- TLS and SASL: each connection over TLS when the URL says so (``tls``), and SASL on it right
  after the handshake, before the session is used (``sasl``): the state is CONNECTED only once
  SASL completed, on every new connection (a resumed session too). A refusal (an untrusted or
  mismatched certificate, SASL refused, no Kerberos ticket) ends a ``start`` at once with
  ``AuthFailed`` and its one line, without trying the other servers: an ensemble's servers share
  their CA, JAAS and KDC, so one's refusal is all of theirs, and a clear line beats a timeout.
  Once started, a refusal is logged (once while it repeats) and the server tried again.

ZooKeeper's numbers are the codec's (``wire.constants``), none are written here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections.abc import Callable
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.retry import RetryPolicy as AiozkRetryPolicy
from aiozk.session import Session
from aiozk.states import SessionStateMachine, States

from .. import errors
from ..aio import cancel_and_wait
from . import sasl, tls
from .connection import ZKConnection, discard
from .errors import SaslRefused
from .raw import Pending, RawRequest
from .wire.constants import AUTH_TYPE, MAX_XID, PROTOCOL_VERSION, EventType, KeeperState

log = logging.getLogger(__name__)


def _quiet_expected_send_errors(record: logging.LogRecord) -> bool:
    # aiozk logs every error answer (NoAuth, BadArguments, ...) with a traceback before raising
    # it; the store turns each into an error for its caller, so the log line is only noise.
    return not (record.msg == "Send exception: %s" and isinstance(record.args, tuple))


logging.getLogger("aiozk.session").addFilter(_quiet_expected_send_errors)

#: Longest pause between two rounds of attempts to reach a server.
MAX_RECONNECT_DELAY = 1.0

#: The watch events about a node (the codec's ``EventType``), not about a watch removed.
NODE_EVENTS = (EventType.NODE_CREATED, EventType.NODE_DELETED, EventType.NODE_DATA_CHANGED,
               EventType.NODE_CHILDREN_CHANGED)


class RetryPolicy(AiozkRetryPolicy):
    """Re-send a read after its connection dropped, never a write (it may have been applied).

    Keeps its count on the request object, so nothing accumulates in the policy (aiozk's policies
    keep a dict keyed by request id that leaks for every request cancelled mid-retry).
    """

    def __init__(self) -> None:
        super().__init__(try_limit=None, sleep_func=lambda _timings: None)

    async def enforce(self, request: Any = None) -> None:
        tries = getattr(request, "_metashift_tries", 0)
        if request is not None:
            request._metashift_tries = tries + 1
        if tries and getattr(request, "writes_data", True):
            raise zk_exc.FailedRetry

    def clear(self, request: Any) -> None:
        pass


class StateMachine(SessionStateMachine):
    """aiozk's session state machine, reporting every transition to the store."""

    def __init__(self, session: Any, on_transition: Callable[[str, str], None]) -> None:
        super().__init__(session=session)
        self._on_transition = on_transition

    def transition_to(self, state: str) -> None:
        old = self.current_state
        super().transition_to(state)
        self._on_transition(old, state)


class SessionExpired(Exception):
    """The server no longer knows our session (it answered the handshake with session id 0)."""


class ZKSession(Session):
    """aiozk's ``Session`` with the fixes of the module doc."""

    conn: Any
    last_zxid: Any
    timeout: Any
    session_id: Any
    xid: int
    password: Any
    heartbeat_handle: asyncio.TimerHandle | None

    def __init__(
        self,
        servers: str,
        timeout: float,
        read_timeout: float,
        auth: bytes | None,
        on_transition: Callable[[str, str], None],
        on_watch_event: Callable[[Any], None],
        *,
        tls_context: ssl.SSLContext | None = None,
        sasl_mechanism: Callable[[str], sasl.Mechanism | None] | None = None,
        sync_reads: bool = False,
    ) -> None:
        super().__init__(servers, timeout, RetryPolicy(), False, read_timeout)
        self.state = StateMachine(self, on_transition)
        self._auth = auth
        self._tls = tls_context
        self._sasl_mechanism = sasl_mechanism
        self._sync_reads = sync_reads
        """Reads follow a sync (``StoreURL.sync_reads``; ``ZKConnection``)."""
        """A connection's SASL mechanism, made for the host it reaches (``None``: no SASL)."""
        self._refused: asyncio.Future[str] | None = None
        self._refusal_logged: str | None = None
        self.last_failure: str | None = None
        """Why the last attempt to reach a server failed, for a timeout's message (no secret)."""
        self._on_watch_event = on_watch_event
        self.auth_future: asyncio.Future[Any] | None = None
        self.auth_error: BaseException | None = None
        self._heartbeat_armed = False
        self.ended = False
        """Set once by ``shut``, never reset: the store is closed (nothing is sent any more)."""

    def send_now(self, request: Any) -> asyncio.Future[Any] | None:
        """Send ``request`` on the current connection without aiozk's per-request machinery
        (no retry policy, no task): a future of ``(zxid, response)``, or ``None`` when the
        session is not connected (the caller then takes the ordinary path). For pipelined
        bulk reads, which the caller sends again on the ordinary path if they fail."""
        conn = self.conn
        if conn is None or conn.closing or self.state not in (States.CONNECTED, States.READ_ONLY):
            return None
        self.xid = self.xid + 1 if self.xid < MAX_XID else 1
        self.set_heartbeat()
        future: asyncio.Future[Any] = conn.send(request, xid=self.xid)
        return future

    def send_raw(self, request: RawRequest, pending: Pending) -> bool:
        """Send a request already in wire form on the current connection (no retry, no task, no
        timer): ``pending`` gets the answer. False when the session is not connected (nothing
        sent; the caller takes the ordinary path)."""
        conn = self.conn
        if conn is None or conn.closing or self.state != States.CONNECTED:
            return False
        self.xid = self.xid + 1 if self.xid < MAX_XID else 1
        self.set_heartbeat()
        conn.send_raw(request, self.xid, pending)
        return True

    # -- finding a server and (re-)establishing the session --

    async def start(self) -> None:
        """aiozk's, ended by the first refusal with ``AuthFailed`` (its one line)."""
        if self.started:
            await super().start()
            return
        self._refused = refused = asyncio.get_running_loop().create_future()
        starting = asyncio.ensure_future(super().start())
        try:
            await asyncio.wait({starting, refused}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
        if starting.done() and not starting.cancelled():
            starting.result()
            return
        raise errors.AuthFailed(refused.result())

    def _refuse(self, message: str) -> None:
        """A server refused us for good (``message``: the one line): the start ends with it; once
        started, it is logged while it is new."""
        self.last_failure = message
        if self._refused is not None and not self._refused.done():
            self._refused.set_result(message)
            return
        if message != self._refusal_logged:
            self._refusal_logged = message
            log.error("%s; trying again", message)

    def _next_xid(self) -> int:
        self.xid = self.xid + 1 if self.xid < MAX_XID else 1
        return self.xid

    async def make_connection(self, host: str, port: int) -> Any:
        conn = ZKConnection(host, port, self.read_timeout, self.event_dispatch, self.connection_dropped, self._tls,
                            self._next_xid if self._sync_reads else None)
        try:
            await asyncio.wait_for(conn.connect(), self.read_timeout)
        except Exception as e:  # refused, timed out, not a ZooKeeper, an untrusted certificate, ...
            log.debug("cannot connect to ZooKeeper at %s:%s: %r", host, port, e)
            if conn.writer is not None:
                conn.writer.close()
            refusal = tls.refusal(e, host, port) if self._tls is not None else None
            if refusal is not None:
                self._refuse(refusal)
            else:
                self.last_failure = f"{host}:{port}: {e!r}"
            return None
        return conn

    async def find_server(self, allow_read_only: bool) -> None:
        delay = 0.05
        while True:
            for host, port in random.sample(self.hosts, len(self.hosts)):
                conn = await self.make_connection(host, port)
                if conn is None:
                    continue
                if conn.start_read_only and not allow_read_only:
                    discard(conn)
                    continue
                old, self.conn = self.conn, conn
                if old is not None:
                    self.last_zxid = max(self.last_zxid or 0, old.last_zxid) or None
                    discard(old)
                log.info("connected to ZooKeeper at %s:%s", host, port)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RECONNECT_DELAY)

    def seen_zxid(self) -> int:
        """The last zxid the session saw, on any path (``ZKConnection.last_zxid``)."""
        conn_zxid = self.conn.last_zxid if self.conn is not None else 0
        return max(self.last_zxid or 0, conn_zxid)

    async def establish_session(self) -> None:
        # the last zxid of every answer, a forwarded request's too: a server that has not seen
        # it yet refuses the session (it would answer from before the session's own writes)
        answer = await self.conn.send_connect(
            protocol.ConnectRequest(
                protocol_version=PROTOCOL_VERSION,
                last_seen_zxid=self.last_zxid or 0,
                timeout=int(self.timeout * 1000),
                session_id=self.session_id or 0,
                password=self.password,
                read_only=self.allow_read_only,
            )
        )
        if answer is None:  # the server hung up: keep the session, try again
            raise ConnectionError("ZooKeeper closed the connection during the handshake")
        _zxid, response = answer
        if response.session_id == 0:
            raise SessionExpired
        self.session_id = response.session_id
        self.password = response.password
        self.timeout = response.timeout / 1000
        mechanism = self._sasl_mechanism(self.conn.host) if self._sasl_mechanism is not None else None
        if mechanism is not None:
            # before anything else on this connection, and before the session is CONNECTED
            await sasl.authenticate(self.conn, mechanism, self._next_xid, self.read_timeout,
                                    f"zk://{self.conn.host}:{self.conn.port}")
        if self._auth is not None:
            # Written before anything else on this connection, so the server applies it first.
            auth = protocol.AuthRequest(type=AUTH_TYPE, scheme="digest", auth=self._auth)
            self.auth_future = fut = self.conn.send(auth)
            fut.add_done_callback(self._auth_done)

    def _auth_done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        error = fut.exception()
        if isinstance(error, zk_exc.AuthFailed):
            self.auth_error = error
            log.error("ZooKeeper refused our digest credentials")

    async def repair_loop(self) -> None:
        while not self.closing:
            await self.state.wait_for(States.SUSPENDED, States.LOST)
            if self.closing:
                break
            await self.find_server(allow_read_only=False)
            try:
                await asyncio.wait_for(self.establish_session(), self.timeout)
            except SessionExpired:
                log.warning("ZooKeeper session %s expired; opening a new one", hex_id(self.session_id))
                self.session_id = None
                self.password = b"\x00"
                discard(self.conn)
                if self.state != States.LOST:
                    self.state.transition_to(States.LOST)
                continue
            except SaslRefused as e:
                self._refuse(str(e))
                discard(self.conn)
                await asyncio.sleep(MAX_RECONNECT_DELAY)
                continue
            except (OSError, TimeoutError, zk_exc.ZKError) as e:
                log.info("ZooKeeper handshake failed (%r); trying again", e)
                self.last_failure = f"the handshake with {self.conn.host}:{self.conn.port} failed: {e!r}"
                discard(self.conn)
                await asyncio.sleep(0.1)
                continue
            self._refusal_logged = None  # a refusal after this success is news again
            self.state.transition_to(States.CONNECTED)
            self.conn.start_read_loop()

    # -- noticing a lost connection --

    def connection_dropped(self, conn: Any) -> None:
        if conn is not self.conn:
            return
        if not self.closing:
            log.info("connection to ZooKeeper at %s:%s lost", conn.host, conn.port)
            if self.state in (States.CONNECTED, States.READ_ONLY):
                self.state.transition_to(States.SUSPENDED)
        discard(conn)

    def set_heartbeat(self) -> None:
        # aiozk re-arms the ping timer after every answer (a timer cancelled and made per request);
        # a ping every third of the session timeout, busy or not, is as good and costs nothing.
        if self._heartbeat_armed:
            return
        self._heartbeat_armed = True
        self.heartbeat_handle = asyncio.get_running_loop().call_later(self.timeout / 3, self._heartbeat_due)

    def _heartbeat_due(self) -> None:
        self._heartbeat_armed = False
        self.heartbeat_handle = None
        if not self.closing:
            self.create_heartbeat()

    async def heartbeat(self) -> None:
        if self.closing:
            return
        await self.ensure_safe_state()
        conn = self.conn
        try:
            zxid, _ = await asyncio.wait_for(conn.send(protocol.PingRequest()), self.timeout * 2 / 3)
            if zxid is not None:
                self.last_zxid = zxid
        except (zk_exc.ZKError, TimeoutError, OSError):
            if not self.closing and conn is self.conn:
                log.info("ZooKeeper at %s:%s stopped answering pings", conn.host, conn.port)
                self.connection_dropped(conn)
        finally:
            if not self.closing:
                self.set_heartbeat()

    # -- watch events, without touching aiozk's per-path callback table --

    def event_dispatch(self, event: Any) -> None:
        if event.type in NODE_EVENTS:
            self._on_watch_event(event)
        elif event.state in (KeeperState.EXPIRED, KeeperState.AUTH_FAILED):
            log.warning("ZooKeeper state event %s; reconnecting", event.state)
            if self.conn is not None:
                self.connection_dropped(self.conn)

    async def set_existing_watches(self) -> None:
        pass  # the store re-adds its persistent watch itself


    # -- the end --

    async def shut(self, send_close: bool, within: float, name: str) -> None:
        """End the session: with ``send_close``, tell the server (its ephemerals go now, not
        after the session timeout), waiting ``within`` seconds at most; then stop the tasks and timers and drop
        the connection. ``name`` names the store in the log of a task that does not stop."""
        self.ended = True
        self.closing = True  # from here on, a dropped connection is not repaired
        if send_close and self.state == States.CONNECTED and self.conn is not None:
            close = protocol.CloseRequest()
            close.writes_data = True  # not re-sent on another connection if this one drops
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.send(close), within)
        pending: list[asyncio.Task[Any]] = []
        if self.repair_loop_task is not None:
            pending.append(self.repair_loop_task)
        if self.heartbeat_task is not None:
            pending.append(self.heartbeat_task)
        await cancel_and_wait(pending, name)
        # after the tasks: aiozk's heartbeat re-arms its timer in a ``finally`` even when cancelled
        if self.heartbeat_handle is not None:
            self.heartbeat_handle.cancel()
            self.heartbeat_handle = None
        if self.conn is not None:
            discard(self.conn)
            self.conn = None
        self.started = False


def hex_id(session_id: int | None) -> str:
    """A session id as ZooKeeper's logs print it."""
    return hex(session_id) if session_id else "-"
