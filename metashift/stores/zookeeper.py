"""ZooKeeper backend of the store layer, on aiozk, with Pulsar's ``ZKMetadataStore`` semantics.

What this module takes from aiozk and what it replaces:

- It uses aiozk's wire protocol (request/response classes) and its ``Session`` (state machine,
  heartbeat, ``send``), but not ``ZKClient``: the client's stat cache grows forever and its
  ``set_data``/``delete`` silently use cached versions. Every request here carries an explicit
  version, and no per-path state is kept anywhere.
- ``_Session`` overrides the parts of aiozk's session that misbehave for a long-lived service:
  server search backs off to at most one second (aiozk: up to 60 s), a failed handshake keeps the
  session id (aiozk threw the session away, losing every ephemeral), a connection that drops is
  noticed at once (aiozk noticed only at the next missed heartbeat), watch events do not grow
  aiozk's callback table, and the digest credentials are re-sent on every new connection (ZooKeeper
  ties authentication to the connection, not the session).
- Writes are never re-sent after the connection dropped under them (the server may have applied
  them): they fail with ``StoreUnavailable``. Reads are retried on the next connection until the
  call's deadline. Every call is bounded by the URL's ``timeout``.
- Notifications come from one persistent recursive watch on the chroot (``addWatch``, ZooKeeper
  3.6+; aiozk lacks the request, defined below), re-added after every reconnect. As with every
  ZooKeeper client, changes made while disconnected are not replayed: listeners learn about the gap
  from the ``ConnectionLost``/``SessionLost`` session events and must re-read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.connection import Connection
from aiozk.protocol.primitives import Int, UString
from aiozk.protocol.request import Request
from aiozk.protocol.response import Response
from aiozk.retry import RetryPolicy
from aiozk.session import Session
from aiozk.states import SessionStateMachine, States

from . import errors, paths
from .aio import cancel_and_wait
from .base import (
    DeleteOp,
    GetOp,
    GetResult,
    MetadataStore,
    NodeInfo,
    Notification,
    NotificationType,
    Op,
    OpResult,
    PutOp,
    Restore,
    SessionEvent,
    Stat,
)
from .urls import StoreURL

log = logging.getLogger(__name__)


def _quiet_expected_send_errors(record: logging.LogRecord) -> bool:
    # aiozk logs every error answer (NoAuth, BadArguments, ...) with a traceback before raising
    # it; the store turns each into an error for its caller, so the log line is only noise.
    return not (record.msg == "Send exception: %s" and isinstance(record.args, tuple))


logging.getLogger("aiozk.session").addFilter(_quiet_expected_send_errors)

#: ZooKeeper's default ``jute.maxbuffer`` is 0xfffff bytes for a whole packet (path, data, ACL,
#: headers); leave 4 KiB for everything but the value.
DEFAULT_MAX_VALUE_SIZE = 1024 * 1024 - 4096

#: Write batches go to the server as ``multi`` requests of at most this many operations and bytes.
MULTI_MAX_OPS = 128
MULTI_MAX_BYTES = 256 * 1024

#: Bulk operations: getChildren2 calls in flight and per page of ``walk``; multis in flight.
_WALK_IN_FLIGHT = 512
_WALK_PAGE = 2000
_RESTORE_MULTIS_IN_FLIGHT = 8

#: Longest pause between two rounds of attempts to reach a server.
MAX_RECONNECT_DELAY = 1.0

_EV_CREATED, _EV_DELETED, _EV_DATA_CHANGED, _EV_CHILDREN_CHANGED = 1, 2, 3, 4


# ---- the addWatch request aiozk lacks (ZooKeeper 3.6+) ----------------------------------------------


class AddWatchRequest(Request):
    """``addWatch`` (opcode 106): a watch that stays after it fires; recursive covers the subtree."""

    opcode = 106
    PERSISTENT = 0
    PERSISTENT_RECURSIVE = 1

    parts = (
        ("path", UString),
        ("mode", Int),
    )


class AddWatchResponse(Response):
    """The server answers with an ErrorResponse (one int, 0); nothing to read from it."""

    opcode = 106
    parts = ()


# ---- aiozk session, made fit for a long-lived service ---------------------------------------------


class _RetryPolicy(RetryPolicy):
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


class _StateMachine(SessionStateMachine):
    def __init__(self, session: Any, on_transition: Callable[[str, str], None]) -> None:
        super().__init__(session=session)
        self._on_transition = on_transition

    def transition_to(self, state: str) -> None:
        old = self.current_state
        super().transition_to(state)
        self._on_transition(old, state)


class _Connection(Connection):
    """A connection that reports its own end instead of waiting for the next missed heartbeat."""

    def __init__(self, host: str, port: int, session: _Session) -> None:
        super().__init__(host, port, watch_handler=session.event_dispatch, read_timeout=session.read_timeout)
        self._session = session

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
            self._session.connection_dropped(self)


def _discard(conn: Any) -> None:
    """Close a connection now: pending requests fail with ConnectError, the socket goes."""
    conn.closing = True
    if conn.read_loop_task is not None and not conn.read_loop_task.done():
        conn.read_loop_task.cancel()
    if conn.pending_count():
        conn.abort()
    if conn.writer is not None:
        conn.writer.close()


class _SessionLost(Exception):
    pass


class _Session(Session):
    conn: Any
    last_zxid: Any
    timeout: Any
    session_id: Any
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
    ) -> None:
        super().__init__(servers, timeout, _RetryPolicy(), False, read_timeout)
        self.state = _StateMachine(self, on_transition)
        self._auth = auth
        self._on_watch_event = on_watch_event
        self.auth_future: asyncio.Future[Any] | None = None
        self.auth_error: BaseException | None = None
        self._heartbeat_armed = False

    # -- finding a server and (re-)establishing the session --

    async def make_connection(self, host: str, port: int) -> Any:
        conn = _Connection(host, port, self)
        try:
            await asyncio.wait_for(conn.connect(), self.read_timeout)
        except Exception as e:  # refused, timed out, not a ZooKeeper, ...
            log.debug("cannot connect to ZooKeeper at %s:%s: %r", host, port, e)
            if conn.writer is not None:
                conn.writer.close()
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
                    _discard(conn)
                    continue
                old, self.conn = self.conn, conn
                if old is not None:
                    _discard(old)
                log.info("connected to ZooKeeper at %s:%s", host, port)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RECONNECT_DELAY)

    async def establish_session(self) -> None:
        answer = await self.conn.send_connect(
            protocol.ConnectRequest(
                protocol_version=0,
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
            raise _SessionLost
        self.session_id = response.session_id
        self.password = response.password
        self.timeout = response.timeout / 1000
        if self._auth is not None:
            # Written before anything else on this connection, so the server applies it first.
            self.auth_future = fut = self.conn.send(protocol.AuthRequest(type=0, scheme="digest", auth=self._auth))
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
            except _SessionLost:
                log.warning("ZooKeeper session %s expired; opening a new one", _hex(self.session_id))
                self.session_id = None
                self.password = b"\x00"
                _discard(self.conn)
                if self.state != States.LOST:
                    self.state.transition_to(States.LOST)
                continue
            except (OSError, TimeoutError, zk_exc.ZKError) as e:
                log.info("ZooKeeper handshake failed (%r); trying again", e)
                _discard(self.conn)
                await asyncio.sleep(0.1)
                continue
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
        _discard(conn)

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
        if event.type in (_EV_CREATED, _EV_DELETED, _EV_DATA_CHANGED, _EV_CHILDREN_CHANGED):
            self._on_watch_event(event)
        elif event.state in (protocol.WatchEvent.SESSION_EXPIRED, protocol.WatchEvent.AUTH_FAILED):
            log.warning("ZooKeeper state event %s; reconnecting", event.state)
            if self.conn is not None:
                self.connection_dropped(self.conn)

    async def set_existing_watches(self) -> None:
        pass  # the store re-adds its persistent watch itself


def _hex(session_id: int | None) -> str:
    return hex(session_id) if session_id else "-"


# ---- the store ---------------------------------------------------------------------------------


class ZooKeeperStore(MetadataStore):
    """A ZooKeeper session behind the ``MetadataStore`` interface.

    Paths are relative to the URL's chroot (created on connect when missing). With credentials in
    the URL the session authenticates with ZooKeeper's digest scheme and every node it creates gets
    the creator-all ACL, so other users can neither read nor write it.
    """

    max_version = 2**31 - 1  # ZooKeeper versions are 32-bit

    def __init__(self, url: StoreURL, *, max_value_size: int = DEFAULT_MAX_VALUE_SIZE, watch: bool = True):
        super().__init__(url)
        self.max_value_size = max_value_size
        self._root = url.root
        self._watch = watch
        self._closed = False
        self._connected_once = False
        self._session_id_seen: int | None = None
        self._lost_timer: asyncio.TimerHandle | None = None
        self._declared_lost = False
        self._tasks: set[asyncio.Task[Any]] = set()
        auth = None
        if url.username is not None:
            auth = f"{url.username}:{url.password or ''}".encode()
            self._acl = [protocol.AUTHED_UNRESTRICTED]  # "auth" scheme = creator-all
        else:
            self._acl = [protocol.UNRESTRICTED_ACCESS]
        self._session = _Session(
            url.host_string(),
            url.session_timeout,
            min(url.call_timeout, 5.0),
            auth,
            self._on_transition,
            self._on_watch_event,
        )

    @classmethod
    async def connect(
        cls,
        url: StoreURL,
        *,
        max_value_size: int = DEFAULT_MAX_VALUE_SIZE,
        watch: bool = True,
        create_root: bool = True,
    ) -> ZooKeeperStore:
        """Open a session on one of ``url``'s servers, create the chroot if it is missing (with
        ``create_root=False``: raise ``NotFound`` naming it, and write nothing).

        ``max_value_size``: the largest value ``put`` accepts (raise it for servers run with a larger
        ``jute.maxbuffer``). ``watch=False`` skips the recursive watch (no notifications), for
        bulk jobs that do not want the server to stream an event per write back to them.
        Raises ``StoreUnavailable`` when no server answers within the URL's ``timeout``,
        ``AuthFailed`` when the credentials are refused.
        """
        store = cls(url, max_value_size=max_value_size, watch=watch)
        try:
            await asyncio.wait_for(store._start(create_root), url.call_timeout)
        except TimeoutError:
            await store._shutdown(send_close=False)
            raise errors.StoreUnavailable(
                f"no ZooKeeper server answered within {url.call_timeout:g}s at {url}"
            ) from None
        except BaseException:
            await store._shutdown(send_close=True)
            raise
        return store

    async def _start(self, create_root: bool) -> None:
        await self._session.start()
        if self._session.auth_future is not None:
            try:
                await self._session.auth_future
            except zk_exc.AuthFailed:
                raise errors.AuthFailed(f"ZooKeeper refused the credentials of user {self.url.username!r}") from None
        if self._root != paths.SEPARATOR:
            if not await self._exists(paths.SEPARATOR):
                if not create_root:
                    raise errors.NotFound(self._root, f"the chroot does not exist on zk://{self.url.host_string()}")
                for p in [*paths.ancestors(self._root), self._root]:
                    with contextlib.suppress(errors.AlreadyExists):
                        await self._call(self._create_request(p, b"", False, False), p)
        # Reading the root checks that our credentials grant access to the namespace at all.
        await self._get(paths.SEPARATOR)
        if self._watch:
            await self._add_watch()

    @property
    def session_id(self) -> int | None:
        """The ZooKeeper session id (the ephemeralOwner of our ephemerals)."""
        sid: int | None = self._session.session_id
        return sid

    # ---- paths and stats ------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        if self._root == paths.SEPARATOR:
            return path
        return self._root if path == paths.SEPARATOR else self._root + path

    def _rel(self, full: str) -> str | None:
        if self._root == paths.SEPARATOR:
            return full
        if full == self._root:
            return paths.SEPARATOR
        if full.startswith(self._root + paths.SEPARATOR):
            return full[len(self._root) :]
        return None

    def _stat(self, path: str, zstat: Any) -> Stat:
        owner = zstat.ephemeral_owner
        return Stat(
            path=path,
            version=zstat.version,
            creation_timestamp=zstat.created,
            modification_timestamp=zstat.modified,
            ephemeral=owner != 0,
            created_by_self=owner != 0 and owner == self._session.session_id,
        )

    # ---- one request ----------------------------------------------------------------------------

    async def _call(self, request: Any, path: str) -> Any:
        """Send one request, bounded by the call timeout; aiozk errors become store errors."""
        if self._closed:
            raise errors.StoreUnavailable("the store is closed", path)
        try:
            async with asyncio.timeout(self.url.call_timeout):
                return await self._session.send(request)
        except Exception as e:
            raise _map_error(e, path, self.url) from e

    def _create_request(self, full: str, value: bytes, ephemeral: bool, sequential: bool) -> Any:
        """A create of ``full``, a server path (chroot included)."""
        request = protocol.Create2Request(path=full, data=value, acl=self._acl)
        request.set_flags(ephemeral=ephemeral, sequential=sequential, container=False)
        return request

    # ---- reads ----------------------------------------------------------------------------------

    async def _get(self, path: str) -> GetResult:
        try:
            response = await self._call(protocol.GetDataRequest(path=self._full(path), watch=False), path)
        except errors.NotFound:
            return None
        return (response.data or b""), self._stat(path, response.stat)

    async def _get_children(self, path: str) -> list[str]:
        try:
            response = await self._call(protocol.GetChildrenRequest(path=self._full(path), watch=False), path)
        except errors.NotFound:
            return []
        return list(response.children)

    async def _exists(self, path: str) -> bool:
        return await self._exists_stat(path) is not None

    async def _exists_stat(self, path: str) -> Any:
        try:
            response = await self._call(protocol.ExistsRequest(path=self._full(path), watch=False), path)
        except errors.NotFound:
            return None
        return response.stat

    async def children_version(self, path: str) -> int | None:
        """The ``cversion`` of ``path`` (its count of child creations and deletions), or ``None``
        when it does not exist. It bounds the next sequential suffix from above: ZooKeeper names
        a sequential child after the count of creations only (see ``sequence_counter``)."""
        zstat = await self._exists_stat(paths.validate(path))
        return None if zstat is None else int(zstat.child_version)

    # ---- writes ---------------------------------------------------------------------------------

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        if sequential or expected_version == -1:
            return await self._create(path, value, ephemeral, sequential)
        full = self._full(path)
        if expected_version is not None:
            try:
                response = await self._call(
                    protocol.SetDataRequest(path=full, data=value, version=expected_version), path
                )
            except errors.NotFound:
                raise errors.BadVersion(path, "node does not exist") from None
            return self._stat(path, response.stat)
        # Blind write: update if it exists, else create; retry when racing a create or delete.
        for _ in range(10):
            try:
                response = await self._call(protocol.SetDataRequest(path=full, data=value, version=-1), path)
                return self._stat(path, response.stat)
            except errors.NotFound:
                pass
            try:
                return await self._create(path, value, ephemeral, False)
            except errors.AlreadyExists:
                continue
        raise errors.BadVersion(path, "node kept being created and deleted concurrently")

    async def _create(self, path: str, value: bytes, ephemeral: bool, sequential: bool) -> Stat:
        for attempt in range(5):
            try:
                response = await self._call(self._create_request(self._full(path), value, ephemeral, sequential), path)
            except errors.NotFound:
                if attempt == 4:
                    raise errors.NotFound(paths.parent(path) or path, "parent kept vanishing") from None
                await self._ensure_parents(path)
                continue
            real = self._rel(response.path) or path
            return self._stat(real, response.stat)
        raise AssertionError("unreachable")

    async def _ensure_parents(self, path: str) -> None:
        """Create the missing ancestors of ``path`` as empty persistent nodes, as Pulsar does.

        The creates are pipelined (one round trip; the server applies them in order); nodes
        another client creates or deletes meanwhile are tolerated, the caller retries.
        """

        async def make(p: str) -> None:
            with contextlib.suppress(errors.AlreadyExists, errors.NotFound):
                await self._call(self._create_request(self._full(p), b"", False, False), p)

        await asyncio.gather(*(make(p) for p in paths.ancestors(path)))

    async def _delete(self, path: str, expected_version: int | None) -> None:
        version = -1 if expected_version is None else expected_version
        await self._call(protocol.DeleteRequest(path=self._full(path), version=version), path)

    # ---- batches --------------------------------------------------------------------------------

    async def _batch(self, ops: list[Op]) -> list[OpResult]:
        """Reads are pipelined (sent at once, answered in order); writes go as ``multi`` requests
        of up to ``MULTI_MAX_OPS`` operations, and a multi that fails (a bad version, a missing
        parent, a blind write of a missing node...) is redone as single calls, so that every
        operation gets the result it would get alone."""
        results: list[OpResult] = [None] * len(ops)
        jobs: list[Any] = []

        async def read(i: int) -> None:
            results[i] = await self._run_one(ops[i])

        async def write(chunk: list[int]) -> None:
            for i, result in zip(chunk, await self._multi([ops[i] for i in chunk]), strict=True):
                results[i] = result

        chunk: list[int] = []
        size = 0
        for i, op in enumerate(ops):
            if not isinstance(op, PutOp | DeleteOp):
                jobs.append(read(i))
                continue
            op_size = len(op.path) + (len(op.value) if isinstance(op, PutOp) else 0) + 64
            if op_size > MULTI_MAX_BYTES:
                jobs.append(read(i))  # too big to share a packet: a single call
                continue
            if chunk and (len(chunk) >= MULTI_MAX_OPS or size + op_size > MULTI_MAX_BYTES):
                jobs.append(write(chunk))
                chunk, size = [], 0
            chunk.append(i)
            size += op_size
        if chunk:
            jobs.append(write(chunk))
        await asyncio.gather(*jobs)
        return results

    async def _multi(self, ops: Sequence[Op]) -> list[OpResult]:
        if len(ops) == 1:
            return [await self._run_one(ops[0])]
        request = protocol.TransactionRequest()
        request.writes_data = True  # aiozk marks multi as a read: it would re-send it
        for op in ops:
            if isinstance(op, PutOp):
                if op.sequential or op.expected_version == -1:
                    request.add(self._create_request(self._full(op.path), op.value, op.ephemeral, op.sequential))
                else:
                    version = -1 if op.expected_version is None else op.expected_version
                    request.add(protocol.SetDataRequest(path=self._full(op.path), data=op.value, version=version))
            else:
                assert isinstance(op, DeleteOp)
                version = -1 if op.expected_version is None else op.expected_version
                request.add(protocol.DeleteRequest(path=self._full(op.path), version=version))
        try:
            response = await self._call(request, ops[0].path)
        except errors.StoreUnavailable as e:
            # Whether the multi was applied is unknown: report it for each op, never re-send.
            return [errors.StoreUnavailable(str(e.args[0]) if e.args else "unavailable", op.path) for op in ops]
        except errors.MetadataStoreError:
            response = None
        answers = None if response is None else response.responses
        if answers is None or len(answers) != len(ops) or any(isinstance(a, Exception) for a in answers):
            return list(await asyncio.gather(*(self._run_one(op) for op in ops)))
        out: list[OpResult] = []
        for op, answer in zip(ops, answers, strict=True):
            if isinstance(op, DeleteOp):
                out.append(None)
            elif hasattr(answer, "stat"):
                out.append(self._stat(op.path, answer.stat))
            else:
                # Inside a multi the server answers a create without its Stat (like Pulsar, which
                # reports a batched create's Stat from what it knows): version 0, our clock.
                assert isinstance(op, PutOp)
                now = int(time.time() * 1000)
                real = self._rel(answer.path) or op.path
                out.append(Stat(real, 0, now, now, op.ephemeral, op.ephemeral))
        return out

    # ---- notifications and session events -------------------------------------------------------

    async def _add_watch(self) -> None:
        try:
            await self._call(
                AddWatchRequest(path=self._root, mode=AddWatchRequest.PERSISTENT_RECURSIVE), paths.SEPARATOR
            )
        except errors.MetadataStoreError as e:
            if isinstance(e.__cause__, zk_exc.Unimplemented | zk_exc.UnknownError):
                log.error("this ZooKeeper has no persistent watches (3.6+ needed): no notifications")
                return
            raise

    def _on_watch_event(self, event: Any) -> None:
        path = self._rel(event.path)
        if path is None:
            return
        kind = event.type
        if kind == _EV_CREATED:
            self._notify(Notification(NotificationType.CREATED, path))
        elif kind == _EV_DELETED:
            self._notify(Notification(NotificationType.DELETED, path))
        elif kind == _EV_DATA_CHANGED:
            self._notify(Notification(NotificationType.MODIFIED, path))
        elif kind == _EV_CHILDREN_CHANGED:
            self._notify(Notification(NotificationType.CHILDREN_CHANGED, path))
        if kind in (_EV_CREATED, _EV_DELETED):
            # A recursive watch reports no child events: derive them, like Pulsar's etcd store.
            parent = paths.parent(path)
            if parent is not None:
                self._notify(Notification(NotificationType.CHILDREN_CHANGED, parent))

    def _on_transition(self, old: str, new: str) -> None:
        """Map aiozk's session states onto Pulsar's session events (called inside aiozk).

        Like Pulsar's ZKSessionWatcher, a connection lost for 5/6 of the session timeout is
        declared SessionLost without waiting for a server to say so (none may be reachable):
        past that point our ephemerals may be gone and another node may own what they claimed.
        """
        if self._closed:
            return
        events: list[SessionEvent] = []
        sid = self._session.session_id
        loop = asyncio.get_running_loop()
        if new == States.SUSPENDED:
            events.append(SessionEvent.CONNECTION_LOST)
            if self._lost_timer is None:
                self._lost_timer = loop.call_later(self.url.session_timeout * 5 / 6, self._declare_session_lost)
        elif new == States.LOST and old != States.LOST:
            self._cancel_lost_timer()
            if not self._declared_lost:
                events.append(SessionEvent.SESSION_LOST)
            self._declared_lost = True
        elif new == States.CONNECTED:
            self._cancel_lost_timer()
            if not self._connected_once:
                self._connected_once = True
            elif self._declared_lost:
                if sid == self._session_id_seen:  # the server kept it after all
                    events.append(SessionEvent.RECONNECTED)
                events.append(SessionEvent.SESSION_REESTABLISHED)
            elif old == States.SUSPENDED and sid == self._session_id_seen:
                events.append(SessionEvent.RECONNECTED)
            else:
                events.append(SessionEvent.SESSION_REESTABLISHED)
            self._declared_lost = False
            self._session_id_seen = sid
            if self._watch and events:
                self._spawn(self._rewatch())
        for event in events:
            loop.call_soon(self._session_event, event)

    def _declare_session_lost(self) -> None:
        self._lost_timer = None
        if self._closed or self._declared_lost:
            return
        self._declared_lost = True
        self._session_event(SessionEvent.SESSION_LOST)

    def _cancel_lost_timer(self) -> None:
        if self._lost_timer is not None:
            self._lost_timer.cancel()
            self._lost_timer = None

    async def _rewatch(self) -> None:
        try:
            await self._add_watch()
        except errors.MetadataStoreError as e:
            log.warning("could not re-add the ZooKeeper watch (%s); will retry on the next reconnect", e)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- life cycle -----------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        await self._shutdown(send_close=True)

    async def _shutdown(self, send_close: bool) -> None:
        self._closed = True
        self._cancel_lost_timer()
        session = self._session
        session.closing = True  # from here on, a dropped connection is not repaired
        if send_close and session.state == States.CONNECTED and session.conn is not None:
            # Ends the session on the server: its ephemerals go now, not after the session timeout.
            close = protocol.CloseRequest()
            close.writes_data = True  # not re-sent on another connection if this one drops
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.send(close), min(self.url.call_timeout, 5.0))
        pending: list[asyncio.Task[Any]] = list(self._tasks)
        if session.repair_loop_task is not None:
            pending.append(session.repair_loop_task)
        if session.heartbeat_task is not None:
            pending.append(session.heartbeat_task)
        await cancel_and_wait(pending, str(self.url))
        # after the tasks: aiozk's heartbeat re-arms its timer in a ``finally`` even when cancelled
        if session.heartbeat_handle is not None:
            session.heartbeat_handle.cancel()
            session.heartbeat_handle = None
        if session.conn is not None:
            _discard(session.conn)
            session.conn = None
        session.started = False


    # ---- bulk operations (the copy, its verification, sample data) ------------------------------
    # Overrides of the generic ``MetadataStore`` implementations, for speed.

    async def walk(
        self, root: str = paths.SEPARATOR, *, prune: Collection[str] = ()
    ) -> AsyncIterator[list[NodeInfo]]:
        """Breadth first with pipelined ``getChildren2``: one call per node gives both its
        children and its own Stat (version, data length, ephemeral owner), so nothing is read."""
        paths.validate(root)
        pruned = set(prune)
        sem = asyncio.Semaphore(_WALK_IN_FLIGHT)

        async def children2(path: str) -> Any:
            async with sem:
                try:
                    return await self._call(protocol.GetChildren2Request(path=self._full(path), watch=False), path)
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
                        page.append(NodeInfo(path, stat.version, stat.data_length, stat.ephemeral_owner != 0))
                    for name in resp.children:
                        child = paths.join(path, name)
                        if child not in pruned:
                            next_frontier.append(child)
                if page:
                    yield page
            frontier = next_frontier

    async def restore_many(self, items: Sequence[Restore]) -> list[int | errors.MetadataStoreError]:
        """Each node's chain (create, then setData at each version, empty values until the last
        one) goes in ``multi`` requests: ZooKeeper applies the same path many times in one
        multi. Short chains share multis, pipelined; a chain longer than one multi is sent multi
        after multi. A multi that fails (a parent missing, a version moved) changed nothing: its
        nodes are read again and finished by the generic path, which names the culprits."""
        for item in items:
            self._check_put(item.path, item.value, None)
            if not 0 <= item.version or not -1 <= item.current <= item.version:
                raise ValueError(f"cannot restore {item.path} from version {item.current} to {item.version}")
        results: list[int | errors.MetadataStoreError] = [0] * len(items)
        retry: set[int] = set()
        sem = asyncio.Semaphore(_RESTORE_MULTIS_IN_FLIGHT)

        def chain(item: Restore) -> list[tuple[Any, int]]:
            full = self._full(item.path)
            out: list[tuple[Any, int]] = []
            version = item.current
            if version == -1:
                value = item.value if item.version == 0 else b""
                out.append((self._create_request(full, value, False, False), len(full) + len(value) + 64))
                version = 0
            while version < item.version:
                value = item.value if version + 1 == item.version else b""
                request = protocol.SetDataRequest(path=full, data=value, version=version)
                out.append((request, len(full) + len(value) + 64))
                version += 1
            return out

        async def send(requests: list[Any], owners: list[int]) -> bool:
            multi = protocol.TransactionRequest()
            multi.writes_data = True  # aiozk marks multi as a read: it would re-send it
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
            start = 0
            while start < len(ops):
                end, size = start, 0
                while (
                    end < len(ops)
                    and end - start < MULTI_MAX_OPS
                    and (end == start or size + ops[end][1] <= MULTI_MAX_BYTES)
                ):
                    size += ops[end][1]
                    end += 1
                if not await send([r for r, _ in ops[start:end]], [i]):
                    return
                start = end

        jobs: list[Any] = []
        batch: list[Any] = []
        owners: list[int] = []
        size = 0
        for i, item in enumerate(items):
            if item.current >= item.version:
                continue
            ops = chain(item)
            ops_size = sum(n for _, n in ops)
            if len(ops) > MULTI_MAX_OPS or ops_size > MULTI_MAX_BYTES:
                jobs.append(long_chain(i, ops))
                continue
            if batch and (len(batch) + len(ops) > MULTI_MAX_OPS or size + ops_size > MULTI_MAX_BYTES):
                jobs.append(send(batch, owners))
                batch, owners, size = [], [], 0
            batch.extend(r for r, _ in ops)
            owners.append(i)
            size += ops_size
        if batch:
            jobs.append(send(batch, owners))
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
            redone = await MetadataStore.restore_many(self, again)
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

    async def sequence_counter(self, parent: str) -> int:
        """ZooKeeper names a sequential child after the parent's count of child *creations*
        (its internal cversion). The cversion it reports counts creations and deletions
        (``2 * creations - live children``), so the count is ``(cversion + children) / 2``."""
        zstat = await self._exists_stat(paths.validate(parent))
        if zstat is None:
            return 0
        return (int(zstat.child_version) + int(zstat.num_children)) // 2

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """Every child creation moves the counter by one: multis of (create, delete) of a
        throw-away child, pipelined, until it is reached."""
        paths.validate(parent)
        counter = await self.sequence_counter(parent)
        if counter >= at_least:
            return 0
        if not await self._exists(parent):
            await self.put(parent, b"")
            counter = await self.sequence_counter(parent)
        probe = self._full(paths.join(parent, "metashift-counter-probe"))
        pairs = at_least - counter
        per_multi = MULTI_MAX_OPS // 2
        sem = asyncio.Semaphore(_RESTORE_MULTIS_IN_FLIGHT)

        async def bump(n: int) -> None:
            multi = protocol.TransactionRequest()
            multi.writes_data = True
            for _ in range(n):
                multi.add(self._create_request(probe, b"", False, False))
                multi.add(protocol.DeleteRequest(path=probe, version=-1))
            async with sem:
                response = await self._call(multi, parent)
            if any(isinstance(a, Exception) for a in response.responses):
                raise errors.MetadataStoreError("could not advance the sequence counter", parent)

        await asyncio.gather(*(bump(min(per_multi, pairs - k)) for k in range(0, pairs, per_multi)))
        return 2 * pairs


def _map_error(e: BaseException, path: str, url: StoreURL) -> errors.MetadataStoreError:
    if isinstance(e, errors.MetadataStoreError):
        return e
    if isinstance(e, zk_exc.NoNode):
        return errors.NotFound(path)
    if isinstance(e, zk_exc.NodeExists):
        return errors.AlreadyExists(path)
    if isinstance(e, zk_exc.BadVersion):
        return errors.BadVersion(path)
    if isinstance(e, zk_exc.NotEmpty):
        return errors.NotEmpty(path)
    if isinstance(e, zk_exc.NoAuth | zk_exc.AuthFailed | zk_exc.InvalidACL):
        who = f"user {url.username!r}" if url.username else "an unauthenticated client"
        return errors.AuthFailed(f"ZooKeeper denies access to {who}", path)
    if isinstance(e, zk_exc.BadArguments):
        # ZooKeeper checks paths on UTF-16 code units: it refuses any character outside the BMP.
        return errors.InvalidPath(path, "ZooKeeper refuses this path")
    if isinstance(e, zk_exc.NoChildrenForEphemerals):
        return errors.InvalidPath(path, "an ephemeral node cannot have children")
    if isinstance(e, TimeoutError):
        return errors.StoreUnavailable(
            f"ZooKeeper at {url.host_string()} did not answer within {url.call_timeout:g}s", path
        )
    if isinstance(
        e,
        zk_exc.ConnectError
        | zk_exc.ConnectionLoss
        | zk_exc.SessionExpired
        | zk_exc.SessionMoved
        | zk_exc.OperationTimeout
        | zk_exc.FailedRetry
        | zk_exc.SessionLost
        | zk_exc.TimeoutError
        | zk_exc.InvalidStateTransition
        | zk_exc.UnfinishedRead
        | OSError,
    ):
        return errors.StoreUnavailable(f"lost the connection to ZooKeeper at {url.host_string()} ({e!r})", path)
    return errors.MetadataStoreError(f"ZooKeeper error {e!r}", path)


__all__ = ["DEFAULT_MAX_VALUE_SIZE", "AddWatchRequest", "ZooKeeperStore"]
