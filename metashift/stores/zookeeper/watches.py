"""ZooKeeper notifications: one persistent recursive watch on the chroot (``addWatch``,
ZooKeeper 3.6+), re-added after every reconnect. As with every ZooKeeper client, changes made
while disconnected are not replayed: listeners learn about the gap from the ``ConnectionLost`` /
``SessionLost`` session events and must re-read."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiozk import exc as zk_exc

from .. import errors, paths
from ..notifications import Notification, NotificationType
from .protocol import EV_CHILDREN_CHANGED, EV_CREATED, EV_DATA_CHANGED, EV_DELETED, AddWatchRequest

log = logging.getLogger(__name__)

_TYPES = {
    EV_CREATED: NotificationType.CREATED,
    EV_DELETED: NotificationType.DELETED,
    EV_DATA_CHANGED: NotificationType.MODIFIED,
    EV_CHILDREN_CHANGED: NotificationType.CHILDREN_CHANGED,
}


async def add_watch(call: Callable[[Any, str], Awaitable[Any]], root: str) -> None:
    """Add the persistent recursive watch on the server path ``root`` with ``call`` (the store's
    one request); a server without persistent watches is logged, not an error."""
    try:
        await call(AddWatchRequest(path=root, mode=AddWatchRequest.PERSISTENT_RECURSIVE), paths.SEPARATOR)
    except errors.MetadataStoreError as e:
        if isinstance(e.__cause__, zk_exc.Unimplemented | zk_exc.UnknownError):
            log.error("this ZooKeeper has no persistent watches (3.6+ needed): no notifications")
            return
        raise


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
