"""ZooKeeper watches on top of the active store's notifications.

One-shot watches (data, exist, child) fire once and are gone; persistent watches (``addWatch``
mode 0) fire for the node itself, children changes included; persistent recursive ones (mode 1)
for the node and its whole subtree, without children events (as ZooKeeper 3.6+ does). The
manager listens to the router's active store and moves to the target when the router switches,
so watches carry on across a migration.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from metashift.agent.core.router import Router
from metashift.agent.zookeeper.session import ZkSession
from metashift.stores import MetadataStore, Notification, NotificationType, paths
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import EventType, WatcherType

DATA, EXIST, CHILD, PERSISTENT, RECURSIVE = "data", "exist", "child", "persistent", "recursive"
KINDS = (DATA, EXIST, CHILD, PERSISTENT, RECURSIVE)


class Watches:
    """Every session's watches, indexed by kind and path.

    The active store is listened to (its whole tree) from the first request that sets a watch,
    asked for before that request reaches the store so that no change after its answer is missed,
    until no session holds a watch: a front whose clients set none costs the store no events.
    """

    def __init__(self, router: Router) -> None:
        self._by_kind: dict[str, dict[str, set[ZkSession]]] = {k: defaultdict(set) for k in KINDS}
        self._router = router
        self._remove: Callable[[], None] | None = None
        router.on_switch(self._switched)

    def want(self) -> None:
        """A request about to set a watch: listen to the active store from now on."""
        if self._remove is None:
            self._remove = self._router.active.add_listener(self._notified)

    async def ready(self) -> None:
        """The active store's server confirmed the watch (for requests that answer at once)."""
        await self._router.active.watch_ready()

    def _switched(self, old: MetadataStore, new: MetadataStore) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = new.add_listener(self._notified)

    def _unwant_if_idle(self) -> None:
        if self._remove is not None and not any(self._by_kind.values()):
            self._remove()
            self._remove = None

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    # ---- registration ---------------------------------------------------------------------------

    def add(self, kind: str, path: str, session: ZkSession) -> None:
        self._by_kind[kind][path].add(session)

    def has(self, kind: str, path: str, session: ZkSession) -> bool:
        return session in self._by_kind[kind].get(path, ())

    def remove(self, kind: str, path: str, session: ZkSession) -> bool:
        holders = self._by_kind[kind].get(path)
        if not holders or session not in holders:
            return False
        holders.discard(session)
        if not holders:
            del self._by_kind[kind][path]
        return True

    def kinds_for(self, watcher_type: int) -> tuple[str, ...]:
        """The kinds a removeWatches/checkWatches ``type`` covers (ZooKeeper's WatcherType:
        1 children, 2 data (exist too), 3 any, 4 persistent, 5 persistent recursive)."""
        return {
            WatcherType.CHILDREN: (CHILD,),
            WatcherType.DATA: (DATA, EXIST),
            WatcherType.ANY: KINDS,
            4: (PERSISTENT,),
            5: (RECURSIVE,),
        }.get(watcher_type, ())

    def drop_session(self, session: ZkSession) -> None:
        for table in self._by_kind.values():
            for path in [p for p, holders in table.items() if session in holders]:
                holders = table[path]
                holders.discard(session)
                if not holders:
                    del table[path]
        self._unwant_if_idle()

    def count(self) -> int:
        return sum(len(h) for table in self._by_kind.values() for h in table.values())

    def paths(self) -> int:
        """How many distinct paths are watched."""
        return len({p for table in self._by_kind.values() for p in table})

    # ---- firing ---------------------------------------------------------------------------------

    def _notified(self, n: Notification) -> None:
        if n.type is NotificationType.CREATED:
            self.fire(EventType.NODE_CREATED, n.path, one_shot=(EXIST,))
        elif n.type is NotificationType.MODIFIED:
            self.fire(EventType.NODE_DATA_CHANGED, n.path, one_shot=(DATA, EXIST))
        elif n.type is NotificationType.DELETED:
            self.fire(EventType.NODE_DELETED, n.path, one_shot=(DATA, EXIST, CHILD))
        elif n.type is NotificationType.CHILDREN_CHANGED:
            self.fire(EventType.NODE_CHILDREN_CHANGED, n.path, one_shot=(CHILD,))

    def fire(self, event_type: int, path: str, one_shot: Iterable[str], sessions: set[ZkSession] | None = None) -> None:
        """Send ``event_type`` on ``path`` to every session watching it (only to ``sessions``
        when given), once per session; one-shot watches of ``one_shot`` kinds are consumed."""
        targets: set[ZkSession] = set()
        for kind in one_shot:
            table = self._by_kind[kind]
            holders = table.get(path)
            if not holders:
                continue
            chosen = holders if sessions is None else holders & sessions
            targets |= chosen
            holders -= chosen
            if not holders:
                del table[path]
        targets |= self._by_kind[PERSISTENT].get(path, set())
        if event_type != EventType.NODE_CHILDREN_CHANGED:
            recursive = self._by_kind[RECURSIVE]
            if recursive:
                node: str | None = path
                while node is not None:
                    targets |= recursive.get(node, set())
                    node = paths.parent(node)
        if sessions is not None:
            targets &= sessions
        if not targets:
            return
        data = wire.watch_event(event_type, path)
        for session in targets:
            if session.alive:
                session.send_event(data)
