"""``ZooKeeperStore``: a ZooKeeper session behind the store interfaces, with Pulsar's
``ZKMetadataStore`` semantics; opening, closing and the parts it is made of."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.states import States

from .. import errors, paths
from ..aio import cancel_and_wait
from ..store import Store
from ..urls import StoreURL
from .bulk import ZooKeeperBulk
from .connection import discard
from .forward import Done, Pending, RawRequest, Rechroot, acl_vector
from .operations import DEFAULT_MAX_VALUE_SIZE
from .protocol import ZKSession
from .session import SessionEvents
from .watches import add_watch_request, notifications, remove_watch_request, watch_refused
from .wire.constants import Op

log = logging.getLogger(__name__)


class ZooKeeperStore(ZooKeeperBulk, Store):
    """A ZooKeeper session behind the ``MetadataStore`` and bulk interfaces.

    Paths are relative to the URL's chroot (created on connect when missing). With credentials in
    the URL the session authenticates with ZooKeeper's digest scheme and every node it creates gets
    the creator-all ACL, so other users can neither read nor write it.
    """

    def __init__(self, url: StoreURL, *, max_value_size: int = DEFAULT_MAX_VALUE_SIZE, watch: bool = True):
        super().__init__(url)
        self.max_value_size = max_value_size
        self._namespace = paths.Namespace(url.root)
        self._watch = watch
        self._watch_replies: set[asyncio.Future[Any]] = set()
        """The server's answers to the watch requests sent and not yet answered."""
        self._closed = False
        auth = None
        if url.username is not None:
            auth = f"{url.username}:{url.password or ''}".encode()
            self._acl = [protocol.AUTHED_UNRESTRICTED]  # "auth" scheme = creator-all
        else:
            self._acl = [protocol.UNRESTRICTED_ACCESS]
        self._rechroot = Rechroot(
            self._namespace, acl_vector([(a.perms, a.id.scheme, a.id.id) for a in self._acl])
        )
        self._events = SessionEvents(
            url.session_timeout, lambda: self._session.session_id, self._session_event, self._on_restored
        )
        self._session = ZKSession(
            url.host_string(),
            url.session_timeout,
            min(url.call_timeout, 5.0),
            auth,
            self._events.transition,
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
        root = self._namespace.root
        if root != paths.SEPARATOR:
            if not await self._exists(paths.SEPARATOR):
                if not create_root:
                    raise errors.NotFound(root, f"the chroot does not exist on zk://{self.url.host_string()}")
                for p in [*paths.ancestors(root), root]:
                    with contextlib.suppress(errors.AlreadyExists):
                        await self._call(self._create_request(p, b"", False, False), p)
        # Reading the root checks that our credentials grant access to the namespace at all.
        await self._get(paths.SEPARATOR)
        # listeners added before the session was up: watch their subtrees now
        self._send_watches(self.watched, frozenset())
        await self.watch_ready()

    # ---- requests forwarded in wire form (``forward``) -------------------------------------------

    @property
    def session_id(self) -> int:
        """The ZooKeeper session's id (the ``ephemeralOwner`` of the ephemerals it creates)."""
        return int(self._session.session_id or 0)

    def forward(self, opcode: int, path: str, rest: bytes, done: Done) -> bool:
        """Send a request whose body is ``path`` then ``rest`` (``forward.PATH_FIRST``) as it is,
        under the chroot; ``done`` gets the answer. False: not connected, nothing sent."""
        if self._closed:
            return False
        request = RawRequest(opcode, self._rechroot.path(path) + rest, opcode in (Op.DELETE, Op.SET_DATA))
        return bool(self._session.send_raw(request, Pending(done, None)))

    def flush(self) -> None:
        """Write now the requests sent so far in this turn of the event loop (they would go at its
        end, together with the later ones): for a caller that knows no more are coming."""
        conn = self._session.conn
        if conn is not None and not conn.closing:
            conn.flush()

    def forward_create(self, opcode: int, path: str, data_field: bytes, flags: int, done: Done) -> bool:
        """Send a create (``Op.CREATE`` or ``Op.CREATE2``) with the store's ACL, under the chroot;
        ``data_field``: its data in wire form, length first (``wire.CreateFields``). The answer's
        path is relative to the chroot. False: not connected, nothing sent."""
        if self._closed:
            return False
        request = RawRequest(opcode, self._rechroot.create_body(path, data_field, flags), True)
        return bool(self._session.send_raw(request, Pending(done, self._rechroot.created)))

    def forward_multi(self, ops: list[tuple[int, Any]], done: Done) -> bool:
        """Send a multi of the codec's request records (``forward.MULTI_OPS``) with the store's ACL,
        under the chroot; the answer's paths are relative. False: not connected, nothing sent."""
        if self._closed:
            return False
        request = RawRequest(Op.MULTI, self._rechroot.multi_body(ops), True)
        return bool(self._session.send_raw(request, Pending(done, self._rechroot.multi_answer)))

    # ---- notifications and session events -------------------------------------------------------

    def _on_watch_event(self, event: Any) -> None:
        for notification in notifications(event, self._namespace):
            self._notify(notification)

    def _watch_scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        self._send_watches(added, removed)

    def _send_watches(self, added: frozenset[str], removed: frozenset[str]) -> None:
        """Ask the server now (before any later request of this session, which it answers in
        order) to watch the subtrees ``added`` and stop watching those ``removed``. Not connected:
        nothing is sent, and the watches are added again once the session is back."""
        if not self._watch or self._closed:
            return
        requests = [add_watch_request(self._namespace.full(p)) for p in sorted(added)]
        requests += [remove_watch_request(self._namespace.full(p)) for p in sorted(removed)]
        for request in requests:
            reply = self._session.send_now(request)
            if reply is None:
                return
            self._watch_replies.add(reply)
            reply.add_done_callback(self._watch_answered)

    def _watch_answered(self, reply: asyncio.Future[Any]) -> None:
        self._watch_replies.discard(reply)
        if reply.cancelled():
            return
        if (error := reply.exception()) is not None:
            watch_refused(error)

    async def watch_ready(self) -> None:
        pending = list(self._watch_replies)
        if pending:
            await asyncio.wait(pending, timeout=self.url.call_timeout)

    def _on_restored(self) -> None:
        """The session is back (the same or a new one): the watches must be added again."""
        self._send_watches(self.watched, frozenset())

    # ---- life cycle -----------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        await self._shutdown(send_close=True)

    async def _shutdown(self, send_close: bool) -> None:
        self._closed = True
        self._events.close()
        session = self._session
        session.closing = True  # from here on, a dropped connection is not repaired
        if send_close and session.state == States.CONNECTED and session.conn is not None:
            # Ends the session on the server: its ephemerals go now, not after the session timeout.
            close = protocol.CloseRequest()
            close.writes_data = True  # not re-sent on another connection if this one drops
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.send(close), min(self.url.call_timeout, 5.0))
        pending: list[asyncio.Task[Any]] = []
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
            discard(session.conn)
            session.conn = None
        session.started = False
