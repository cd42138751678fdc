"""``OxiaStore``: Oxia behind the store interfaces, in Pulsar's ``OxiaMetadataStore`` layout:
opening and closing it, and the parts it delegates to."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence

from .. import paths
from ..aio import cancel_and_wait
from ..bulk import NodeInfo, NodeRead, Restore, SessionLife
from ..errors import InvalidStoreURL, MetadataStoreError
from ..handover import SessionHandle
from ..ops import GetResult
from ..stat import Stat
from ..store import Store
from ..urls import StoreURL
from .connection import Liveness, OxiaConnection
from .keys import Keys
from .operations import MAX_VALUE_SIZE, Operations
from .records import Records
from .restores import Restores
from .sequence_counters import SequenceCounters
from .session import Sessions, keepalive_period
from .session_lives import session_lives
from .tree_reads import TreeReads
from .watches import Notifications

log = logging.getLogger(__name__)

#: Sibling names tried for a shard's barrier (a hash lands on each of N shards within a few N).
_BARRIER_NAMES = 100_000


# The base class is the interfaces and their template methods, shared by every backend
# (``MetadataStore`` checks arguments and calls ``_get``, ``_put``...; ``BulkStore`` checks and
# calls ``_walk``...): the store supplies those hooks by delegating to its parts.
class OxiaStore(Store):
    """A ``MetadataStore`` and bulk store on Oxia, with Pulsar's ``OxiaMetadataStore`` layout.

    Its parts: the connection (``connection.OxiaConnection``) and the per-shard sessions
    (``session.Sessions``); the records, read and put on their shards (``records.Records``,
    with ``batcher``); single operations (``operations.Operations``); notifications
    (``watches.Notifications``); the copy's tree reads (``tree_reads.TreeReads``), restores
    (``restores.Restores``) and sequence counters (``sequence_counters.SequenceCounters``).
    """

    max_value_size = MAX_VALUE_SIZE
    # Pulsar's names: ten digits (the suffix is the parent's modifications count, not ZooKeeper's
    # count of child creations; the ZooKeeper front then takes Pulsar's names, as a broker does)
    zookeeper_sequential_names = True
    # A put makes its missing parents: a copy restores parents first, so that each is restored
    # with its own version instead of found made (empty, version 0) by its child's put.
    needs_parents = True
    # a counter is the parent's modifications count, set by one write (``advance_sequence_counter``)
    sequence_counter_in_one_write = True

    def __init__(self, url: StoreURL) -> None:
        super().__init__(url)
        self._keys = Keys(url.root)
        # ConnectionLost once a part of the connection is down for a keep-alive period (``Liveness``)
        self._conn = OxiaConnection(url, Liveness(self._session_event, grace=keepalive_period(url.session_timeout)))
        # Pulsar's store takes a random identity: the client identity of its ephemeral records
        self._sessions = Sessions(self._conn, str(uuid.uuid4()), self._session_event)
        self._sessions.on_new_session = self._new_session
        self._records = Records(self._conn, self._keys, self._sessions)
        self._operations = Operations(self._conn, self._keys, self._records)
        self._tree_reads = TreeReads(self._conn, self._keys, self._records, self._operations)
        self._restores = Restores(self._records)
        self._counters = SequenceCounters(self._records, self._operations)
        self._notifications = Notifications(self._conn, self._keys, self._notify)
        self._tasks: list[asyncio.Task[None]] = []
        self._watch_enabled = True

    @classmethod
    async def connect(cls, url: StoreURL, *, watch: bool = True, resume: SessionHandle | None = None) -> OxiaStore:
        """Take the shard assignments from the first host of ``url`` that answers and start the
        keep-alive (sessions are made by the first ephemeral put on each shard; notification
        streams by the first listener). ``StoreUnavailable`` at once when every host refuses the
        connection, within about ``url.call_timeout`` when none answers; a ``MetadataStoreError``
        when the server has no such namespace. ``watch=False``: no notifications ever.

        ``resume``: the handle a predecessor left (``session_handle``): the store takes its
        client identity and keeps alive every one of its sessions the server still has (their
        records read as ``created_by_self``; ``resumed`` when all of them were)."""
        if url.scheme != "oxia":
            raise InvalidStoreURL(f"not an oxia URL: {url}")
        store = cls(url)
        store._watch_enabled = watch
        try:
            loop = asyncio.get_running_loop()
            await store._conn.open(loop.time() + store._conn.timeout)
            if resume is not None and resume.kind == "oxia" and resume.identity:
                store._sessions.identity = resume.identity
                store.resumed = await store._sessions.adopt(resume.shards)
            store._tasks.append(loop.create_task(store._sessions.keepalive_loop(), name=f"oxia-keepalive {url}"))
        except BaseException:
            await store._shutdown()
            raise
        return store

    # ---- the MetadataStore's operations (``operations``) ----------------------------------------

    async def _get(self, path: str) -> GetResult:
        return await self._operations.get(path)

    async def _exists(self, path: str) -> bool:
        return await self._operations.exists(path)

    async def _get_children(self, path: str) -> list[str]:
        return await self._operations.get_children(path)

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        return await self._operations.put(path, value, expected_version, ephemeral, sequential)

    async def _delete(self, path: str, expected_version: int | None) -> None:
        await self._operations.delete(path, expected_version)

    # ---- the bulk interface (``tree_reads``, ``restores``, ``sequence_counters``) ---------------

    def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        return self._tree_reads.walk(root, prune)

    def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        return self._tree_reads.read_trees(roots, prune)

    async def _restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        return await self._restores.restore_many(items)

    async def position_of(self, path: str) -> int | None:
        """The record's modification time in ms (by the shard leader's clock): Oxia keeps no
        global revision, so it orders writes to the server clock's millisecond."""
        record = await self._records.get(paths.validate(path), value=False)
        return None if record is None else int(record.version.modified_timestamp)

    async def children_version(self, path: str) -> int | None:
        return await self._counters.children_version(path)

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        return await self._counters.advance_sequence_counter(parent, at_least)

    async def session_lives(self, sessions: Mapping[int, Sequence[str]]) -> dict[int, SessionLife]:
        """Each owner's sessions, as their records tell (``session_lives``)."""
        return await session_lives(
            self._conn, self._keys, lambda path: self._records.get(path, value=False), sessions)

    # ---- watches (``watches``) ------------------------------------------------------------------

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

    def barrier_paths(self, path: str) -> list[str]:
        """Oxia orders notifications per shard only: ``path``, and for each other shard the first
        of ``path-1``, ``path-2``, ... whose key lands on it (the same names every time)."""
        conn = self._conn
        wanted = {s.id for s in conn.shards}
        covered = {conn.shard_for(self._keys.key(path)).id}
        found = [path]
        n = 0
        while not wanted <= covered and n < _BARRIER_NAMES:
            n += 1
            sibling = f"{path}-{n}"
            shard = conn.shard_for(self._keys.key(sibling)).id
            if shard not in covered:
                covered.add(shard)
                found.append(sibling)
        return found

    @property
    def notifications_in_order(self) -> bool:
        return len(self._conn.shards) <= 1

    async def watch_ready(self) -> None:
        await self._notifications.wait_ready(self._conn.timeout)

    # ---- life cycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the notification streams and the sessions (our ephemerals vanish at once), then
        the channels. Idempotent."""
        await self._shutdown()

    def _new_session(self) -> None:
        if self.on_handle_change is not None:
            self.on_handle_change()

    def session_handle(self) -> SessionHandle | None:
        sessions = self._sessions
        return SessionHandle("oxia", identity=sessions.identity, shards=tuple(sorted(sessions.ids.items())),
                             timeout=sessions.timeout)

    async def detach(self) -> None:
        """The sessions are not closed: they (and their records) live out their timeout."""
        await self._shutdown(end_sessions=False)

    async def _shutdown(self, end_sessions: bool = True) -> None:
        if self._conn.closed:
            return
        await self._notifications.stop()
        self._conn.closed = True
        await cancel_and_wait(self._tasks, str(self.url))
        self._tasks.clear()
        self._records.batcher.cancel()
        if end_sessions:
            await self._sessions.close()
        await self._conn.close()
