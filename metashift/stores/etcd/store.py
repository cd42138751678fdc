"""``EtcdStore``: etcd v3 behind the store interfaces, in Pulsar's ``EtcdMetadataStore`` layout;
opening, closing and the parts it is made of (connection, session lease, watch)."""

from __future__ import annotations

import asyncio
import logging

from ..aio import cancel_and_wait
from ..errors import InvalidStoreURL, StoreFull
from ..notifications import SessionEvent
from ..store import Store
from ..urls import StoreURL
from .bulk import EtcdBulk
from .connection import EtcdConnection
from .keys import Keys
from .lease import SessionLease
from .node_reads import NodeReads
from .operations import CHILDREN_PAGE
from .tree_writes import EtcdTreeWrites
from .watches import Watcher

log = logging.getLogger(__name__)


class EtcdStore(EtcdTreeWrites, EtcdBulk, Store):
    """A ``MetadataStore`` and bulk store on etcd v3, with Pulsar's ``EtcdMetadataStore`` layout."""

    def __init__(self, url: StoreURL) -> None:
        super().__init__(url)
        self._keys = Keys(url.root)
        self._conn = EtcdConnection(url, self._keys)
        self._lease = SessionLease(self._conn, self._session_event)
        self._node_reads = NodeReads(self._conn, CHILDREN_PAGE)
        self._watchers: dict[str, tuple[Watcher, asyncio.Task[None]]] = {}
        """The watch of each subtree listened to (``listeners``), and the task that keeps it."""
        self._conn.on_failover = self._restart_watches
        self._tasks: list[asyncio.Task[None]] = []
        self._watch_enabled = True

    @classmethod
    async def connect(cls, url: StoreURL, *, watch: bool = True) -> EtcdStore:
        """Connect to the first host of ``url`` that answers, grant the session lease and start
        the keep-alive (a watch starts with the first listener of its subtree). ``StoreUnavailable``
        at once when every host refuses the connection, within about ``url.call_timeout`` when
        none answers; ``AuthFailed`` when the credentials are refused. ``watch=False``: no watch
        ever (no notifications), for bulk jobs that do not want every write streamed back."""
        if url.scheme != "etcd":
            raise InvalidStoreURL(f"not an etcd URL: {url}")
        store = cls(url)
        store._watch_enabled = watch
        try:
            await store._start()
        except BaseException:
            await store._shutdown(revoke=False)
            raise
        return store

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._conn.timeout
        await self._conn.open(deadline)
        try:
            await self._lease.grant()
        except StoreFull:
            if self._watch_enabled:
                raise
            # A bulk reader (a verification) needs no lease, and an etcd out of space still serves
            # reads; ephemeral puts are refused until the keep-alive loop gets a lease.
            log.warning("%s: no session lease (etcd is out of space); reads only", self.url)
        self._tasks.append(asyncio.create_task(self._lease.keepalive_loop(), name=f"etcd-keepalive {self.url}"))

    # ---- watches ------------------------------------------------------------------------------

    def _watch_scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        if not self._watch_enabled or self._conn.closed:
            return
        for root in removed:
            if (gone := self._watchers.pop(root, None)) is not None:
                gone[1].cancel()
        for root in added:
            watcher = Watcher(self._conn, root, self._notify, self._missed_changes)
            task = asyncio.get_running_loop().create_task(watcher.loop(), name=f"etcd-watch {self.url} {root}")
            self._watchers[root] = (watcher, task)

    def _restart_watches(self) -> None:
        for watcher, _ in self._watchers.values():
            watcher.restart()

    async def watch_ready(self) -> None:
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
        self._session_event(SessionEvent.CONNECTION_LOST)
        self._session_event(SessionEvent.RECONNECTED)

    async def close(self) -> None:
        """Stop the tasks, revoke the session lease (our ephemerals vanish at once), close the
        channel. Idempotent."""
        await self._shutdown(revoke=True)

    async def _shutdown(self, revoke: bool) -> None:
        if self._conn.closed:
            return
        self._conn.closed = True
        await cancel_and_wait([*self._tasks, *(task for _, task in self._watchers.values())], str(self.url))
        self._tasks.clear()
        self._watchers.clear()
        if revoke:
            await self._lease.revoke_on_close()
        self._lease.id = 0
        await self._conn.close()
