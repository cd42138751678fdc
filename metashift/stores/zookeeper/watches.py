"""ZooKeeper notifications (``Watches``): a persistent recursive watch (``addWatch``, ZooKeeper
3.6+) on each subtree the store's listeners ask for, re-added after every reconnect. As with every ZooKeeper
client, changes made while disconnected are not replayed: listeners learn about the gap from the
``ConnectionLost`` / ``SessionLost`` session events and must re-read."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiozk import exc as zk_exc

from .. import paths
from ..notifications import Notification, NotificationType
from .raw import RawRequest
from .session import ZKSession
from .wire.constants import AddWatchMode, EventType, Op, WatcherType
from .wire.jute import Writer

log = logging.getLogger(__name__)

_TYPES = {
    EventType.NODE_CREATED: NotificationType.CREATED,
    EventType.NODE_DELETED: NotificationType.DELETED,
    EventType.NODE_DATA_CHANGED: NotificationType.MODIFIED,
    EventType.NODE_CHILDREN_CHANGED: NotificationType.CHILDREN_CHANGED,
}


def add_watch_request(root: str) -> RawRequest:
    """The request (``addWatch``, ZooKeeper 3.6+, which aiozk lacks) for a persistent recursive
    watch on the server path ``root``."""
    return RawRequest(Op.ADD_WATCH, Writer().string(root).int(AddWatchMode.PERSISTENT_RECURSIVE).bytes(), False)


def remove_watch_request(root: str) -> RawRequest:
    """The request that ends the persistent recursive watch on the server path ``root``.

    It names the watcher type ``ANY``: it ends a persistent recursive watch on every server with
    persistent watches (3.6+), where ``PERSISTENT_RECURSIVE`` exists only from 3.9; the store's
    session sets no other watch on the path."""
    return RawRequest(Op.REMOVE_WATCHES, Writer().string(root).int(WatcherType.ANY).bytes(), False)


def watch_refused(error: BaseException) -> None:
    """Log why the server refused a watch request (a server without persistent watches, 3.6+
    needed, sends no notifications; a watch already gone needs no removing)."""
    if isinstance(error, zk_exc.NoWatcher):
        return
    if isinstance(error, zk_exc.Unimplemented | zk_exc.UnknownError):
        log.error("this ZooKeeper has no persistent watches (3.6+ needed): no notifications")
    else:
        log.warning("ZooKeeper refused a watch request: %r", error)


def notifications(event: Any, namespace: paths.Namespace) -> list[Notification]:
    """The notifications of one watch event; none for a path outside ``namespace``."""
    path = namespace.relative(event.path)
    kind = _TYPES.get(event.type)
    if path is None or kind is None:
        return []
    out = [Notification(kind, path)]
    if kind in (NotificationType.CREATED, NotificationType.DELETED):
        # A recursive watch reports no child events: derive them, like Pulsar's etcd store.
        parent = paths.parent(path)
        if parent is not None:
            out.append(Notification(NotificationType.CHILDREN_CHANGED, parent))
    return out


class Watches:
    """The session's watches on the subtrees the store's listeners ask for, and the
    notifications of the events they bring."""

    def __init__(
        self,
        session: ZKSession,
        namespace: paths.Namespace,
        notify: Callable[[Notification], None],
        enabled: bool,
        call_timeout: float,
    ) -> None:
        self._session = session
        self._namespace = namespace
        self._notify = notify
        self._enabled = enabled
        """False: no watch is ever set (bulk jobs that do not want an event per write)."""
        self._call_timeout = call_timeout
        self._replies: set[asyncio.Future[Any]] = set()
        """The server's answers to the watch requests sent and not yet answered."""

    def deliver(self, event: Any) -> None:
        """A watch event came (from the connection's read loop): notify the listeners."""
        for notification in notifications(event, self._namespace):
            self._notify(notification)

    def send(self, added: frozenset[str], removed: frozenset[str]) -> None:
        """Ask the server now (before any later request of this session, which it answers in
        order) to watch the subtrees ``added`` and stop watching those ``removed``. Not connected:
        nothing is sent, and the watches are added again once the session is back."""
        if not self._enabled or self._session.ended:
            return
        requests = [add_watch_request(self._namespace.full(p)) for p in sorted(added)]
        requests += [remove_watch_request(self._namespace.full(p)) for p in sorted(removed)]
        for request in requests:
            reply = self._session.send_now(request)
            if reply is None:
                return
            self._replies.add(reply)
            reply.add_done_callback(self._answered)

    def _answered(self, reply: asyncio.Future[Any]) -> None:
        self._replies.discard(reply)
        if reply.cancelled():
            return
        if (error := reply.exception()) is not None:
            watch_refused(error)

    async def ready(self) -> None:
        """Wait (within the call timeout) until the server answered the watch requests sent."""
        pending = list(self._replies)
        if pending:
            await asyncio.wait(pending, timeout=self._call_timeout)
