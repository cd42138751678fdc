"""``ZooKeeperStore``: a ZooKeeper session behind the store interfaces, with Pulsar's
``ZKMetadataStore`` semantics: opening and closing it, and the parts it delegates to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiozk import exc as zk_exc
from aiozk import protocol

from .. import errors, paths
from ..batching import BatchedStore, is_write, op_size
from ..bulk import NodeInfo, NodeRead, Restore, SessionLife
from ..handover import SessionHandle
from ..ops import GetOp, GetResult, Op, OpResult
from ..stat import Stat
from ..store import Store
from ..urls import StoreURL
from . import sasl, tls
from .bulk_reads import BulkReads
from .calls import Calls
from .forward import Done, Forwarder, Rechroot, acl_vector
from .operations import DEFAULT_MAX_VALUE_SIZE, MULTI_MAX_BYTES, MULTI_MAX_OPS, Operations
from .restores import Restores
from .sequence_counters import SequenceCounters
from .session import ZKSession
from .session_events import SessionEvents
from .session_lives import session_lives
from .tree_reads import TreeReads
from .watches import Watches
from .wire.constants import MAX_VERSION

log = logging.getLogger(__name__)


# The base classes are the interfaces and their template methods, shared by every backend
# (``MetadataStore`` checks arguments and calls ``_get``, ``_put``...; ``BatchedStore`` cuts a
# batch into requests and calls ``_send_batch``; ``BulkStore`` checks and calls ``_walk``...): the
# store supplies those hooks by delegating to its parts, which hold the ZooKeeper work.
class ZooKeeperStore(BatchedStore, Store):
    """A ZooKeeper session behind the ``MetadataStore`` and bulk interfaces.

    Paths are relative to the URL's chroot (created on connect when missing). With credentials in
    the URL (and no ``sasl``) the session authenticates with ZooKeeper's digest scheme and every
    node it creates gets the creator-all ACL, so other users can neither read nor write it. With
    ``sasl=`` the session authenticates by SASL (``session``, ``sasl``, ``kerberos``) and its nodes
    are open to all, as Pulsar's ``ZKMetadataStore`` makes them (``OPEN_ACL_UNSAFE``, SASL or not:
    the brokers, bookies and metashift of a SASL cluster are different principals that must read
    each other's nodes; the server's ``sessionRequireClientSASLAuth`` keeps the others out).
    ``tls=true``: every connection over TLS (``tls``).

    Its parts: the session (``session.ZKSession``) and its events (``session_events``); the
    calls on it (``calls.Calls``); single operations and multis (``operations.Operations``);
    watches (``watches.Watches``); many reads at once (``bulk_reads.BulkReads``); the copy's
    tree reads (``tree_reads.TreeReads``), restores (``restores.Restores``) and sequence
    counters (``sequence_counters.SequenceCounters``); the agent's forwarded requests
    (``forward.Forwarder``).
    """

    max_version = MAX_VERSION
    zookeeper_sequential_names = True
    needs_parents = True
    batch_max_ops = MULTI_MAX_OPS
    batch_max_bytes = MULTI_MAX_BYTES

    def __init__(self, url: StoreURL, *, max_value_size: int = DEFAULT_MAX_VALUE_SIZE, watch: bool = True):
        super().__init__(url)
        self.max_value_size = max_value_size
        namespace = paths.Namespace(url.root)
        self._tls = tls.client_context(url)
        auth = None
        if url.username is not None and url.sasl is None:
            auth = f"{url.username}:{url.password or ''}".encode()
            acl = [protocol.AUTHED_UNRESTRICTED]  # "auth" scheme = creator-all
        else:
            acl = [protocol.UNRESTRICTED_ACCESS]
        rechroot = Rechroot(namespace, acl_vector([(a.perms, a.id.scheme, a.id.id) for a in acl]))
        self._events = SessionEvents(
            url.session_timeout, lambda: self._session.session_id, self._session_event, self._on_restored
        )
        self._session = ZKSession(
            url.host_string(),
            url.session_timeout,
            min(url.call_timeout, 5.0),
            auth,
            self._events.transition,
            # a lambda: the watches are made after the session they send their requests on
            lambda event: self._watches.deliver(event),
            tls_context=self._tls,
            sync_reads=url.sync_reads,
            sasl_mechanism=(lambda host: sasl.mechanism(url, host)) if url.sasl else None,
        )
        self._watches = Watches(self._session, namespace, self._notify, watch, url.call_timeout)
        calls = Calls(url, self._session, namespace, acl, rechroot)
        self._calls = calls
        self._operations = Operations(calls)
        self._bulk_reads = BulkReads(calls)
        self._tree_reads = TreeReads(calls, self._bulk_reads)
        self._restores = Restores(calls, self)
        self._counters = SequenceCounters(calls, self._operations, self)
        self._forwarder = Forwarder(self._session, rechroot)

    @classmethod
    async def connect(
        cls,
        url: StoreURL,
        *,
        max_value_size: int = DEFAULT_MAX_VALUE_SIZE,
        watch: bool = True,
        create_root: bool = True,
        resume: SessionHandle | None = None,
    ) -> ZooKeeperStore:
        """Open a session on one of ``url``'s servers, create the chroot if it is missing (with
        ``create_root=False``: raise ``NotFound`` naming it, and write nothing).

        ``max_value_size``: the largest value ``put`` accepts (raise it for servers run with a larger
        ``jute.maxbuffer``). ``watch=False`` skips the recursive watch (no notifications), for
        bulk jobs that do not want the server to stream an event per write back to them.
        Raises ``StoreUnavailable`` when no server answers within the URL's ``timeout``,
        ``AuthFailed`` when the credentials are refused.

        ``resume``: the handle of a session a predecessor left (``session_handle``): the handshake
        asks for that session id with its password, and ZooKeeper gives it back with its
        ephemerals if it has not expired (``resumed``); otherwise the store has a new session.
        A start that fails leaves a resumed session alive (a next attempt may still resume it).
        """
        store = cls(url, max_value_size=max_value_size, watch=watch)
        if resume is not None and resume.kind == "zk" and resume.id:
            store._session.session_id = resume.id
            store._session.password = resume.secret
            store._session.last_zxid = resume.last_zxid or None
        try:
            await asyncio.wait_for(store._start(create_root), url.call_timeout)
        except TimeoutError:
            await store._shutdown(send_close=False)
            last = store._session.last_failure
            raise errors.StoreUnavailable(
                f"no ZooKeeper server answered within {url.call_timeout:g}s at {url}"
                + (f" (last: {last})" if last else "")
            ) from None
        except BaseException:
            await store._shutdown(send_close=resume is None)
            raise
        store.resumed = resume is not None and store.session_id == resume.id
        return store

    async def _start(self, create_root: bool) -> None:
        await self._session.start()
        if self._session.auth_future is not None:
            try:
                await self._session.auth_future
            except zk_exc.AuthFailed:
                raise errors.AuthFailed(f"ZooKeeper refused the credentials of user {self.url.username!r}") from None
        root = self._calls.namespace.root
        if root != paths.SEPARATOR:
            if not await self._operations.exists(paths.SEPARATOR):
                if not create_root:
                    raise errors.NotFound(root, f"the chroot does not exist on zk://{self.url.host_string()}")
                for p in [*paths.ancestors(root), root]:
                    with contextlib.suppress(errors.AlreadyExists):
                        await self._calls.call(self._calls.create_request(p, b"", False, False), p)
        # Reading the root checks that our credentials grant access to the namespace at all.
        await self._operations.get(paths.SEPARATOR)
        # listeners added before the session was up: watch their subtrees now
        self._watches.send(self.watched, frozenset())
        await self.watch_ready()

    # ---- the MetadataStore's operations (``operations``) ----------------------------------------

    async def _get(self, path: str) -> GetResult:
        return await self._operations.get(path)

    async def _get_children(self, path: str) -> list[str]:
        return await self._operations.get_children(path)

    async def _exists(self, path: str) -> bool:
        return await self._operations.exists(path)

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        return await self._operations.put(path, value, expected_version, ephemeral, sequential)

    async def _delete(self, path: str, expected_version: int | None) -> None:
        await self._operations.delete(path, expected_version)

    # ---- batches: writes in one ``multi``, gets as the bulk reads (``BatchedStore``) ------------

    def _batch_kind(self, op: Op) -> str | None:
        if isinstance(op, GetOp):
            return "reads"
        return "multi" if is_write(op) else None

    def _batch_size(self, op: Op) -> int:
        return op_size(op, len(op.path))

    async def _send_batch(self, ops: list[Op]) -> list[OpResult] | None:
        if isinstance(ops[0], GetOp):
            return await self._bulk_reads.gets([op.path for op in ops])
        return await self._operations.multi(ops)

    # ---- the bulk interface (``tree_reads``, ``restores``, ``sequence_counters``) ---------------

    async def read_many(self, items: Sequence[str]) -> list[NodeRead | None]:
        return await self._tree_reads.read_many(items)

    def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        return self._tree_reads.read_trees(roots, prune)

    def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        return self._tree_reads.walk(root, prune)

    async def _restore_many(self, items: Sequence[Restore]) -> list[int | errors.MetadataStoreError]:
        return await self._restores.restore_many(items)

    async def position_of(self, path: str) -> int | None:
        """The node's mzxid: the zxid of the transaction that last wrote it."""
        zstat = await self._operations.exists_stat(paths.validate(path))
        return None if zstat is None else int(zstat.mzxid)

    async def children_version(self, path: str) -> int | None:
        return await self._counters.children_version(path)

    async def sequence_counter(self, parent: str) -> int:
        return await self._counters.sequence_counter(parent)

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        return await self._counters.advance_sequence_counter(parent, at_least)

    async def session_lives(self, sessions: Mapping[int, Sequence[str]]) -> dict[int, SessionLife]:
        """Each session, as the four-letter commands of the URL's servers tell (``session_lives``)."""
        return await session_lives(self.url.hosts, sessions, own=self.session_id,
                                   own_timeout=float(self._session.timeout or 0), touch=lambda: self.exists("/"),
                                   tls=self._tls)

    # ---- requests forwarded in wire form (``forward``), for the agent's ZooKeeper front ----------

    @property
    def session_id(self) -> int:
        """The ZooKeeper session's id (the ``ephemeralOwner`` of the ephemerals it creates)."""
        return int(self._session.session_id or 0)

    def forward(self, opcode: int, path: str, rest: bytes, done: Done) -> bool:
        """``Forwarder.forward``: a request sent as it is, under the chroot."""
        return self._forwarder.forward(opcode, path, rest, done)

    def forward_create(self, opcode: int, path: str, data_field: bytes, flags: int, done: Done) -> bool:
        """``Forwarder.forward_create``: a create with the store's ACL, under the chroot."""
        return self._forwarder.forward_create(opcode, path, data_field, flags, done)

    def forward_multi(self, ops: list[tuple[int, Any]], done: Done) -> bool:
        """``Forwarder.forward_multi``: a multi with the store's ACL, under the chroot."""
        return self._forwarder.forward_multi(ops, done)

    def flush(self) -> None:
        """``Forwarder.flush``: write the requests sent in this turn of the event loop now."""
        self._forwarder.flush()

    # ---- notifications and session events (``watches``, ``session_events``) ---------------------

    def _watch_scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        self._watches.send(added, removed)

    async def watch_ready(self) -> None:
        await self._watches.ready()

    def _on_restored(self) -> None:
        """The session is back (the same or a new one): the watches must be added again."""
        self._watches.send(self.watched, frozenset())

    # ---- life cycle -----------------------------------------------------------------------------

    async def close(self) -> None:
        if self._session.ended:
            return
        await self._shutdown(send_close=True)

    def session_handle(self) -> SessionHandle | None:
        session = self._session
        if not session.session_id:
            return None
        return SessionHandle("zk", id=int(session.session_id), secret=bytes(session.password or b""),
                             timeout=float(session.timeout), last_zxid=session.seen_zxid())

    async def detach(self) -> None:
        """No closeSession: the session (and its ephemerals) lives out its timeout on the server."""
        if self._session.ended:
            return
        await self._shutdown(send_close=False)

    async def _shutdown(self, send_close: bool) -> None:
        self._events.close()
        await self._session.shut(send_close, min(self.url.call_timeout, 5.0), str(self.url))
