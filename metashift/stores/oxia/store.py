"""``OxiaStore``: Oxia behind the store interfaces, in Pulsar's ``OxiaMetadataStore`` layout;
opening, closing and the parts it is made of (connection, batcher, sessions, notifications)."""

from __future__ import annotations

import asyncio
import logging
import uuid

from ..aio import cancel_and_wait
from ..errors import InvalidStoreURL
from ..store import Store
from ..urls import StoreURL
from .batcher import Batcher
from .bulk import OxiaBulk
from .connection import Liveness, OxiaConnection
from .keys import Keys
from .session import Sessions
from .watches import Notifications

log = logging.getLogger(__name__)


class OxiaStore(OxiaBulk, Store):
    """A ``MetadataStore`` and bulk store on Oxia, with Pulsar's ``OxiaMetadataStore`` layout."""

    def __init__(self, url: StoreURL) -> None:
        super().__init__(url)
        self._keys = Keys(url.root)
        self._conn = OxiaConnection(url, Liveness(self._session_event))
        # Pulsar's store takes a random identity: the client identity of its ephemeral records
        self._sessions = Sessions(self._conn, str(uuid.uuid4()), self._session_event)
        self._batcher = Batcher(self._conn)
        self._notifications = Notifications(self._conn, self._keys, self._notify)
        self._tasks: list[asyncio.Task[None]] = []
        self._watch_enabled = True

    @classmethod
    async def connect(cls, url: StoreURL, *, watch: bool = True) -> OxiaStore:
        """Take the shard assignments from the first host of ``url`` that answers and start the
        keep-alive (sessions are made by the first ephemeral put on each shard; notification
        streams by the first listener). ``StoreUnavailable`` at once when every host refuses the
        connection, within about ``url.call_timeout`` when none answers; a ``MetadataStoreError``
        when the server has no such namespace. ``watch=False``: no notifications ever."""
        if url.scheme != "oxia":
            raise InvalidStoreURL(f"not an oxia URL: {url}")
        store = cls(url)
        store._watch_enabled = watch
        try:
            loop = asyncio.get_running_loop()
            await store._conn.open(loop.time() + store._conn.timeout)
            store._tasks.append(loop.create_task(store._sessions.keepalive_loop(), name=f"oxia-keepalive {url}"))
        except BaseException:
            await store._shutdown()
            raise
        return store

    # ---- watches ------------------------------------------------------------------------------

    def _watch_scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        """Oxia streams every change of a shard: the streams run while any listener does."""
        if not self._watch_enabled or self._conn.closed:
            return
        if self.watched and not self._notifications.running:
            self._notifications.start()
        elif not self.watched and self._notifications.running:
            close = self._notifications.detach()
            self._tasks = [t for t in self._tasks if not t.done()]
            self._tasks.append(asyncio.get_running_loop().create_task(close()))

    async def watch_ready(self) -> None:
        await self._notifications.wait_ready(self._conn.timeout)

    # ---- life cycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the notification streams and the sessions (our ephemerals vanish at once), then
        the channels. Idempotent."""
        await self._shutdown()

    async def _shutdown(self) -> None:
        if self._conn.closed:
            return
        await self._notifications.stop()
        self._conn.closed = True
        await cancel_and_wait(self._tasks, str(self.url))
        self._tasks.clear()
        self._batcher.cancel()
        await self._sessions.close()
        await self._conn.close()
