"""``EtcdStore``: etcd v3 behind the store interfaces, in Pulsar's ``EtcdMetadataStore`` layout:
opening and closing it, and the parts it delegates to."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence

from .. import paths
from ..aio import cancel_and_wait
from ..batching import BatchedStore
from ..bulk import NodeInfo, NodeRead, Restore, SessionLife
from ..errors import InvalidStoreURL, MetadataStoreError, StoreFull
from ..handover import SessionHandle
from ..ops import GetResult, Op, OpResult
from ..stat import Stat
from ..store import Store
from ..tree_writes import TreeResult, TreeWrite
from ..urls import StoreURL
from .connection import EtcdConnection
from .history import History
from .keys import Keys
from .lease import SessionLease
from .lease_lives import lease_lives
from .operations import MAX_VALUE_SIZE, TXN_MAX_BYTES, TXN_MAX_OPS, Operations
from .restores import Restores
from .sequence_counters import SequenceCounters
from .tree_reads import TreeReads
from .tree_writes import TreeWrites
from .txn_budget import TxnBudget
from .watches import Watches

log = logging.getLogger(__name__)


# The base classes are the interfaces and their template methods, shared by every backend
# (``MetadataStore`` checks arguments and calls ``_get``, ``_put``...; ``BatchedStore`` cuts a
# batch into requests and calls ``_send_batch``; ``BulkStore`` checks and calls ``_walk``...): the
# store supplies those hooks by delegating to its parts, which hold the etcd work.
class EtcdStore(BatchedStore, Store):
    """A ``MetadataStore`` and bulk store on etcd v3, with Pulsar's ``EtcdMetadataStore`` layout.

    Its parts: the connection (``connection.EtcdConnection``) and the session lease
    (``lease.SessionLease``); single operations and batch txns (``operations.Operations``, with
    ``node_reads``); ZooKeeper's tree writes (``tree_writes.TreeWrites``); watches
    (``watches.Watches``); the copy's tree reads (``tree_reads.TreeReads``), restores
    (``restores.Restores``) and sequence counters (``sequence_counters.SequenceCounters``), whose
    txns share a budget (``txn_budget.TxnBudget``); the history (``history.History``).
    """

    max_value_size = MAX_VALUE_SIZE
    batch_max_ops = TXN_MAX_OPS
    batch_max_bytes = TXN_MAX_BYTES
    batch_requests_in_flight = 8
    batch_singles_in_flight = 256
    tree_writes_in_one_round = True

    def __init__(self, url: StoreURL) -> None:
        super().__init__(url)
        self._keys = Keys(url.root)
        self._conn = EtcdConnection(url, self._keys)
        self._lease = SessionLease(self._conn, self._session_event)
        self._operations = Operations(self._conn, self._keys, self._lease)
        self._tree_writes = TreeWrites(
            self._conn, self._keys, self._lease, self._operations, self._check_put, self._check_delete
        )
        self._watches = Watches(self._conn, self._notify, self._session_event)
        self._conn.on_failover = self._watches.restart
        self._tree_reads = TreeReads(self._conn, self._keys)
        budget = TxnBudget(self._conn)
        self._restores = Restores(self._conn, self._keys, budget)
        self._history = History(self._conn, self._keys)
        self._counters = SequenceCounters(self._conn, self._keys, self._operations, self._history, budget)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def connect(cls, url: StoreURL, *, watch: bool = True, resume: SessionHandle | None = None) -> EtcdStore:
        """Connect to the first host of ``url`` that answers, grant the session lease and start
        the keep-alive (a watch starts with the first listener of its subtree). ``StoreUnavailable``
        at once when every host refuses the connection, within about ``url.call_timeout`` when
        none answers; ``AuthFailed`` when the credentials are refused. ``watch=False``: no watch
        ever (no notifications), for bulk jobs that do not want every write streamed back.

        ``resume``: the handle of a lease a predecessor left (``session_handle``): when etcd
        still has it (time to live above 0), the store keeps it alive and puts its ephemerals
        under it (``resumed``); otherwise it grants a new one."""
        if url.scheme != "etcd":
            raise InvalidStoreURL(f"not an etcd URL: {url}")
        store = cls(url)
        store._watches.enabled = watch
        try:
            await store._start(resume)
        except BaseException:
            await store._shutdown(revoke=False)
            raise
        return store

    async def _start(self, resume: SessionHandle | None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._conn.timeout
        await self._conn.open(deadline)
        if resume is not None and resume.kind == "etcd" and resume.id and await self._lease.adopt(resume.id):
            self.resumed = True
            self._tasks.append(asyncio.create_task(self._lease.keepalive_loop(), name=f"etcd-keepalive {self.url}"))
            return
        try:
            await self._lease.grant()
        except StoreFull:
            if self._watches.enabled:
                raise
            # A bulk reader (a verification) needs no lease, and an etcd out of space still serves
            # reads; ephemeral puts are refused until the keep-alive loop gets a lease.
            log.warning("%s: no session lease (etcd is out of space); reads only", self.url)
        self._tasks.append(asyncio.create_task(self._lease.keepalive_loop(), name=f"etcd-keepalive {self.url}"))

    # ---- the MetadataStore's operations (``operations``, ``tree_writes``) -----------------------

    async def _get(self, path: str) -> GetResult:
        return await self._operations.get(path)

    async def _exists(self, path: str) -> bool:
        return await self._operations.exists(path)

    async def _get_children(self, path: str) -> list[str]:
        return await self._operations.get_children(path)

    async def get_node(self, path: str) -> tuple[bytes, Stat, list[str]] | None:
        """The value, Stat and children of ``path`` in one txn (``Operations.get_node``)."""
        return await self._operations.get_node(paths.validate(path))

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        return await self._operations.put(path, value, expected_version, ephemeral, sequential)

    async def _delete(self, path: str, expected_version: int | None) -> None:
        await self._operations.delete(path, expected_version)

    def _batch_kind(self, op: Op) -> str | None:
        return self._operations.batch_kind(op)

    def _batch_size(self, op: Op) -> int:
        return self._operations.batch_size(op)

    async def _send_batch(self, ops: list[Op]) -> list[OpResult] | None:
        return await self._operations.send_batch(ops)

    async def tree_writes(self, ops: Sequence[TreeWrite]) -> list[TreeResult]:
        return await self._tree_writes.tree_writes(ops)

    async def set_data(self, path: str, value: bytes, expected_version: int | None = None) -> tuple[Stat, int]:
        """ZooKeeper's setData in one txn (``TreeWrites.set_data``)."""
        return await self._tree_writes.set_data(path, value, expected_version)

    # ---- the bulk interface (``tree_reads``, ``restores``, ``sequence_counters``, ``history``) ---

    def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        return self._tree_reads.walk(root, prune)

    def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        return self._tree_reads.read_trees(roots, prune)

    async def _restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        return await self._restores.restore_many(items)

    async def position_of(self, path: str) -> int | None:
        return await self._history.position_of(path)

    async def children_version(self, path: str) -> int | None:
        return await self._counters.children_version(path)

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        return await self._counters.advance_sequence_counter(parent, at_least)

    async def advance_sequence_counters(self, wanted: dict[str, int]) -> int:
        return await self._counters.advance_sequence_counters(wanted)

    async def compact_history(self, *, wait: bool = True) -> None:
        await self._history.compact_history(wait=wait)

    async def history_bytes(self) -> int | None:
        return await self._history.history_bytes()

    async def session_lives(self, sessions: Mapping[int, Sequence[str]]) -> dict[int, SessionLife]:
        """Each lease's time to live, as etcd tells it (``lease_lives``)."""
        return await lease_lives(self._conn, sessions)

    # ---- watches (``watches``) ------------------------------------------------------------------

    def _watch_scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        self._watches.scope_changed(added, removed)

    async def watch_ready(self) -> None:
        await self._watches.ready()

    # ---- life cycle -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the tasks, revoke the session lease (our ephemerals vanish at once), close the
        channel. Idempotent."""
        await self._shutdown(revoke=True)

    def session_handle(self) -> SessionHandle | None:
        if not self._lease.id:
            return None
        return SessionHandle("etcd", id=self._lease.id, timeout=float(self._lease.ttl))

    async def detach(self) -> None:
        """The lease is not revoked: it (and the keys under it) lives out its TTL in etcd."""
        await self._shutdown(revoke=False)

    async def _shutdown(self, revoke: bool) -> None:
        if self._conn.closed:
            return
        self._conn.closed = True
        await cancel_and_wait([*self._tasks, *self._watches.take_tasks()], str(self.url))
        self._tasks.clear()
        if revoke:
            await self._lease.revoke_on_close()
        self._lease.id = 0
        await self._conn.close()
