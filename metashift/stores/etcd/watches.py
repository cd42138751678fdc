"""etcd notifications (``Watches``): a watch on each subtree the store's listeners ask for (a key and the range
of the keys below it), from the last revision the connection saw, resumed after the last revision
seen whenever the stream breaks (server restart, failover), so no event is lost unless compacted.
Created (kv.version == 1) / Modified / Deleted, plus ChildrenChanged of the parent on create and
delete (Pulsar's ``handleWatchResponse``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc
from aetcd import rpc

from .. import paths
from ..aio import cancelled_by_caller
from ..errors import MetadataStoreError
from ..notifications import Notification, NotificationType, SessionEvent
from .connection import EtcdConnection, stale_token

log = logging.getLogger(__name__)

#: Pause before a broken or canceled watch is opened again.
RETRY_PAUSE_SECONDS = 0.5
#: Pause before a watch etcd refused the user is asked again (the operator may grant it meanwhile).
DENIED_PAUSE_SECONDS = 10.0


class Watcher:
    """The watch stream of one subtree of a store, turning etcd events into notifications."""

    def __init__(
        self, conn: EtcdConnection, root: str, notify: Callable[[Notification], None],
        missed: Callable[[], None] | None = None,
    ) -> None:
        self._conn = conn
        self.root = root
        self._notify = notify
        self._missed = missed
        """Told when the watch resumed after a compaction: changes in between were missed."""
        #: Set once the server confirmed the watch.
        self.ready = asyncio.Event()
        self._call: Any = None
        # after the last revision this connection saw: a change after any answer it had is sent
        self._next_rev = conn.revision + 1 if conn.revision else 0
        #: etcd refused this watch the user's permissions (said once).
        self._refused = False

    def restart(self) -> None:
        """Break the stream: the loop opens it again (on the connection's current host)."""
        if self._call is not None:
            self._call.cancel()

    async def loop(self) -> None:
        """Keep the watch open until the connection closes."""
        conn = self._conn
        # the node's own key and every key below it (at the store's root: all of its keys)
        ranges = conn.keys.watch_ranges(self.root)
        while not conn.closed:
            call = None
            pause = RETRY_PAUSE_SECONDS
            try:
                used = conn.metadata
                call = conn.watch.Watch(metadata=used)
                self._call = call
                for start, end in ranges:  # the watches of one subtree share the stream
                    create = rpc.WatchCreateRequest(key=start, range_end=end, start_revision=self._next_rev)
                    await call.write(rpc.WatchRequest(create_request=create))
                created = 0
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        break
                    # a refused create is created and canceled: not a watch that serves
                    if resp.created and not resp.canceled and self._next_rev == 0:
                        self._next_rev = resp.header.revision + 1
                    if resp.created and not resp.canceled:
                        created += 1
                        if created >= len(ranges):
                            self.ready.set()
                    if resp.compact_revision:
                        log.warning(
                            "%s: watch resumed after compaction at revision %d; changes in between were missed",
                            conn.url,
                            resp.compact_revision,
                        )
                        self._next_rev = resp.compact_revision
                        if self._missed is not None:
                            self._missed()
                    for event in resp.events:
                        # seen before it is told: a watch a listener opens in answer to this event
                        # starts after it (as on ZooKeeper), not at an older revision that would
                        # send it this event and those before it again
                        conn.revision = max(conn.revision, event.kv.mod_revision)
                        self._on_event(event)
                        self._next_rev = max(self._next_rev, event.kv.mod_revision + 1)
                    if resp.canceled:
                        pause = await self._canceled(resp.cancel_reason, used)
                        break
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                if cancelled_by_caller():
                    raise
                # ``restart`` (a failover) cancelled the stream, or closed its channel: grpc.aio
                # raises CancelledError on the read, which ended this loop and with it the watch
                # (no notification ever after); open it again, on the connection's new host
            except grpc.aio.AioRpcError as e:
                if not conn.closed and e.code() != grpc.StatusCode.CANCELLED:
                    log.debug("%s: watch stream broke: %s", conn.url, e.details())
                    conn.poke.set()
            except Exception:
                log.exception("%s: watch failed", conn.url)
            finally:
                self._call = None
            if call is not None:
                call.cancel()
            if not conn.closed:
                await asyncio.sleep(pause)

    async def _canceled(self, reason: str, used: Any) -> float:
        """etcd canceled the watch (``reason``): a stale token is renewed, a refusal of the user's
        permissions said once (the watch is asked again, seldom, in case the role changes). The
        pause before the watch is asked again."""
        conn = self._conn
        if stale_token(reason) and conn.url.username is not None:
            try:
                await conn.reauthenticate(used)
            except MetadataStoreError as e:
                log.warning("%s: watch of %s: %s", conn.url, self.root, e)
                return DENIED_PAUSE_SECONDS
            return RETRY_PAUSE_SECONDS
        refused = conn.refusal(reason) if reason else None
        if refused is not None:
            self.ready.set()  # what the server answered: nobody waits for it any longer
            if not self._refused:
                self._refused = True
                log.error("%s: no notifications of %s: %s", conn.url, self.root, refused)
            return DENIED_PAUSE_SECONDS
        if reason:
            log.warning("%s: watch canceled: %s", conn.url, reason)
        return RETRY_PAUSE_SECONDS

    def _on_event(self, event: Any) -> None:
        path = self._conn.keys.path_of(event.kv.key)
        if path is None:
            return
        if event.type == rpc.Event.PUT:
            if event.kv.version == 1:
                self._notify(Notification(NotificationType.CREATED, path))
                self._notify_parent(path)
            else:
                self._notify(Notification(NotificationType.MODIFIED, path))
        else:
            self._notify(Notification(NotificationType.DELETED, path))
            self._notify_parent(path)

    def _notify_parent(self, path: str) -> None:
        parent = paths.parent(path)
        if parent is not None:
            self._notify(Notification(NotificationType.CHILDREN_CHANGED, parent))


class Watches:
    """The watches of the subtrees the store's listeners ask for: one ``Watcher`` and the task
    that keeps it per subtree."""

    def __init__(
        self, conn: EtcdConnection, notify: Callable[[Notification], None], emit: Callable[[SessionEvent], None]
    ) -> None:
        self._conn = conn
        self._notify = notify
        self._emit = emit
        self.enabled = True
        """False: no watch is ever opened (bulk jobs that do not want every write streamed back)."""
        self._watchers: dict[str, tuple[Watcher, asyncio.Task[None]]] = {}

    def scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        """Open the watches of the subtrees ``added``, close those of the subtrees ``removed``."""
        if not self.enabled or self._conn.closed:
            return
        for root in removed:
            if (gone := self._watchers.pop(root, None)) is not None:
                gone[1].cancel()
        for root in added:
            watcher = Watcher(self._conn, root, self._notify, self._missed_changes)
            task = asyncio.get_running_loop().create_task(watcher.loop(), name=f"etcd-watch {self._conn.url} {root}")
            self._watchers[root] = (watcher, task)

    def restart(self) -> None:
        """Break every watch stream: each opens again, on the connection's current host (failover)."""
        for watcher, _ in self._watchers.values():
            watcher.restart()

    async def ready(self) -> None:
        """Wait (within the call timeout) until the server confirmed every watch."""
        waits = [asyncio.ensure_future(w.ready.wait()) for w, _ in self._watchers.values() if not w.ready.is_set()]
        if waits:
            try:
                await asyncio.wait(waits, timeout=self._conn.timeout)
            finally:
                for wait in waits:
                    wait.cancel()

    def _missed_changes(self) -> None:
        """The watch resumed after a compaction: listeners lost changes, which is what a lost
        connection tells them (ConnectionLost, then Reconnected), so they read again."""
        self._emit(SessionEvent.CONNECTION_LOST)
        self._emit(SessionEvent.RECONNECTED)

    def take_tasks(self) -> list[asyncio.Task[None]]:
        """The watches' tasks, for the store to cancel on close; the watches are forgotten."""
        tasks = [task for _, task in self._watchers.values()]
        self._watchers.clear()
        return tasks
