"""Pulsar's ``MetadataStore`` API (PIP-45), asyncio flavoured: what brokers, bookies and the
agent's clients see of a store.

Public methods check their arguments here, once, for every implementation, then call the
``_``-prefixed primitive; so a bad path or an oversize value is rejected before anything is sent
and nothing is written. The bulk interface of the copy is apart (``bulk.BulkStore``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from . import paths
from .errors import BadVersion, InvalidPath, MetadataStoreError, NotFound, ValueTooLarge
from .handover import SessionHandle
from .listeners import Listeners
from .notifications import Notification, NotificationListener, SessionEvent, SessionListener
from .ops import DeleteOp, ExistsOp, GetChildrenOp, GetOp, GetResult, Op, OpResult, PutOp
from .stat import Stat
from .tree_writes import TreeResult, TreeWrite
from .urls import StoreURL

log = logging.getLogger(__name__)

#: A ZooKeeper sequential name's ten-digit suffix; attempts of ``next_sequence`` on a busy parent.
_SEQUENCE_SUFFIX = re.compile(r"(\d{10})$")
_SEQUENCE_ATTEMPTS = 50

#: Bytes of path (chroot or prefix included) that every store's limit leaves room for beside a
#: value of ``max_value_size``.
PATH_ALLOWANCE = 2048


class MetadataStore(ABC):
    """An open connection to one metadata store, with one session.

    Ephemeral nodes created through this object live as long as its session: until ``close()``,
    or until the server expires the session.
    """

    #: Largest value, in bytes, that ``put`` accepts on this store (with a path of up to
    #: ``PATH_ALLOWANCE`` bytes; a longer path leaves less room for the value).
    max_value_size: int
    #: Largest version a node can reach on this store.
    max_version: int = 2**63 - 1
    #: ``put(..., sequential=True)`` names nodes as ZooKeeper does (ten digits, from the parent's
    #: own count of child creations). False: Pulsar's etcd names (the parent key's version,
    #: unpadded); a ZooKeeper-protocol server then takes its numbers from ``next_sequence``.
    zookeeper_sequential_names: bool = False
    #: ``tree_writes`` carries several writes in one round (else it applies none and the caller
    #: checks and writes them one by one).
    tree_writes_in_one_round: bool = False

    def __init__(self, url: StoreURL) -> None:
        self.url = url
        self._listeners = Listeners(self._watch_scope_changed)
        self._session_listeners: list[SessionListener] = []

    # ---- reads ----------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult:
        """The value and Stat of ``path``, or ``None`` when it does not exist."""
        return await self._get(paths.validate(path))

    async def get_children(self, path: str) -> list[str]:
        """Names of the children of ``path``, sorted; empty when ``path`` does not exist."""
        return sorted(await self._get_children(paths.validate(path)))

    async def exists(self, path: str) -> bool:
        return await self._exists(paths.validate(path))

    async def get_node(self, path: str) -> tuple[bytes, Stat, list[str]] | None:
        """The value, Stat and sorted children of ``path`` together (``None`` when it does not
        exist): what ZooKeeper's getData, exists and getChildren2 answer. In one round trip where
        the store can (etcd: one txn); here, a get and a listing side by side."""
        got, kids = await asyncio.gather(self.get(path), self.get_children(path))
        return None if got is None else (got[0], got[1], kids)

    # ---- writes ---------------------------------------------------------------------------------

    async def set_data(self, path: str, value: bytes, expected_version: int | None = None) -> tuple[Stat, int]:
        """ZooKeeper's setData: a new value for the existing node ``path`` (``NotFound`` when it
        is missing; ``BadVersion`` when ``expected_version``, ``None`` for any, differs), which
        stays ephemeral if it was. Returns its new Stat and how many children it has. In one
        round trip where the store can (etcd: one txn); here, a read, a compare-and-set (again
        when a blind one lost a race) and a listing."""
        self._check_put(path, value, expected_version)
        for _ in range(_SEQUENCE_ATTEMPTS):
            got = await self.get(path)
            if got is None:
                raise NotFound(path)
            if expected_version is not None and got[1].version != expected_version:
                raise BadVersion(path)
            try:
                stat = await self.put(path, value, got[1].version, ephemeral=got[1].ephemeral)
            except BadVersion:
                if expected_version is None:
                    continue
                raise
            return stat, len(await self.get_children(path))
        raise BadVersion(path, "the node kept changing")

    async def tree_writes(self, ops: Sequence[TreeWrite]) -> list[TreeResult]:
        """Apply ``ops`` in order with ZooKeeper's tree rules (``tree_writes`` module), in as few
        rounds as the store can, each all or nothing: the results of the ops that applied, from
        the first. Fewer results than ops: the next one's condition failed (or the store would
        refuse it: a bad path, a value too large), and neither it nor any after it was written;
        the caller learns why by running it alone. Here: none applied (no store-side conditions)."""
        return []

    async def next_sequence(self, parent: str) -> int:
        """The next number of ``parent``'s sequence, taken, for ZooKeeper-style sequential names
        on a store without its own (``zookeeper_sequential_names`` False): the parent key's
        version (Pulsar's counter on etcd) moved by a compare-and-set that keeps its value, and
        at least one more than the highest ten-digit suffix among the children, so that a lock
        queue never goes backwards after a migration. Raises ``BadVersion`` when the parent kept
        moving under it."""
        floor = 0
        for kid in await self.get_children(parent):
            m = _SEQUENCE_SUFFIX.search(kid)
            if m:
                floor = max(floor, int(m.group(1)) + 1)
        for _ in range(_SEQUENCE_ATTEMPTS):
            got = await self.get(parent) if parent != paths.SEPARATOR else None
            try:
                if got is None:
                    stat = await self.put(parent, b"", None)
                else:
                    stat = await self.put(parent, got[0], got[1].version, ephemeral=got[1].ephemeral)
            except BadVersion:
                continue
            return max(stat.version, floor)
        raise BadVersion(parent, "the sequence counter kept moving")

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        """Write ``value`` at ``path``.

        ``expected_version``: ``None`` writes blindly; ``-1`` requires that the node does not
        exist (``AlreadyExists`` otherwise); ``n >= 0`` is a compare-and-set (``BadVersion`` when
        the version differs or the node is missing). A sequential put appends the store's suffix
        to ``path``; the returned Stat carries the real path.
        """
        self._check_put(path, value, expected_version, sequential)
        if self._impossible_version(PutOp(path, b"", expected_version)):
            raise BadVersion(path)
        return await self._put(path, bytes(value), expected_version, ephemeral, sequential)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete ``path``: ``NotFound`` when missing, ``BadVersion`` when the version differs."""
        self._check_delete(path, expected_version)
        if self._impossible_version(DeleteOp(path, expected_version)):
            raise BadVersion(path)
        await self._delete(path, expected_version)

    async def batch(self, ops: Sequence[Op]) -> list[OpResult]:
        """Run operations together; each result is the value the single call would return, or
        the ``MetadataStoreError`` it would raise. Operations on different paths are sent
        together, in no particular order; operations on one path apply in batch order, each
        seeing the ones before it (a batch is cut into rounds with one operation per path).
        Arguments are checked first: one bad operation rejects the whole batch before anything
        is sent."""
        checked: list[Op] = []
        for op in ops:
            if isinstance(op, PutOp):
                self._check_put(op.path, op.value, op.expected_version, op.sequential)
                op = dataclasses.replace(op, value=bytes(op.value))
            elif isinstance(op, DeleteOp):
                self._check_delete(op.path, op.expected_version)
            else:
                paths.validate(op.path)
            checked.append(op)
        # a compare-and-set against a version this store cannot hold fails alone, unsent
        results: list[OpResult] = [None] * len(checked)
        rounds: list[list[int]] = []
        last_round: dict[str, int] = {}
        for i, op in enumerate(checked):
            if self._impossible_version(op):
                results[i] = BadVersion(op.path)
                continue
            r = last_round.get(op.path, -1) + 1
            last_round[op.path] = r
            if r == len(rounds):
                rounds.append([])
            rounds[r].append(i)
        for members in rounds:
            for i, result in zip(members, await self._batch([checked[i] for i in members]), strict=True):
                results[i] = result
        return results

    # ---- notifications --------------------------------------------------------------------------

    def add_listener(self, listener: NotificationListener, under: str = paths.SEPARATOR) -> Callable[[], None]:
        """Call ``listener`` for every change at or below ``under``; returns a function that
        removes it. The store watches only the subtrees its listeners ask for (``listeners``), from
        now on: a ZooKeeper store asks its server before it sends any later request, so a read
        made after this call is followed by every later change; an etcd store's watch starts at the
        last revision it saw. ``watch_ready`` waits until the server confirmed the watch."""
        return self._listeners.add(listener, under)

    @property
    def watched(self) -> frozenset[str]:
        """The subtrees the store watches for its listeners (none below another)."""
        return self._listeners.roots

    async def watch_ready(self) -> None:
        """Return once the server confirmed the watch of every subtree listened to (at once for a
        store that is not connected: its session events tell the listeners to read again)."""
        return None

    def barrier_paths(self, path: str) -> list[str]:
        """``path`` and, when the store sends its notifications on several streams, each in write
        order but not with one another (Oxia: one per shard), a sibling of ``path`` on each other
        stream: once a write to every one of them was heard, every change written before them was
        heard. ZooKeeper and etcd send one stream: ``[path]``."""
        return [path]

    @property
    def notifications_in_order(self) -> bool:
        """Every notification comes in the order of the writes, across the whole tree (one stream)."""
        return len(self.barrier_paths(paths.SEPARATOR)) == 1

    def _watch_scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        """Start watching the subtrees ``added``, stop watching those ``removed`` (a store without
        notifications does nothing)."""
        return None

    def add_session_listener(self, listener: SessionListener) -> Callable[[], None]:
        self._session_listeners.append(listener)
        return lambda: (
            self._session_listeners.remove(listener) if listener in self._session_listeners else None
        )

    def _notify(self, notification: Notification) -> None:
        self._listeners.notify(notification)

    def _session_event(self, event: SessionEvent) -> None:
        log.info("%s session event: %s", self.url, event.value)
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed for %s", event)

    # ---- life cycle -----------------------------------------------------------------------------

    @abstractmethod
    async def close(self) -> None:
        """Close the session (its ephemerals go) and the connection. Idempotent."""

    # ---- a session handed to the next process (``handover``) ------------------------------------

    #: True when ``open_store(resume=...)`` got the handed session back (its ephemerals are ours).
    resumed: bool = False
    #: Called (synchronously) when ``session_handle()`` changes before an ephemeral is put on the
    #: new session (Oxia: a session made on another shard), so that a process keeping the handle
    #: for its successor has it before any ephemeral lives on that session.
    on_handle_change: Callable[[], None] | None = None

    def session_handle(self) -> SessionHandle | None:
        """What a successor process needs to resume this store's session (``None``: nothing to
        resume, e.g. no session yet). The handle is a secret: keep it out of logs."""
        return None

    async def detach(self) -> None:
        """Close the connection but leave the session to live out its timeout on the server, so
        that a successor can resume it with ``session_handle()``. Idempotent; stores that cannot
        hand a session over close it."""
        await self.close()

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ---- what each backend implements -----------------------------------------------------------

    @abstractmethod
    async def _get(self, path: str) -> GetResult: ...

    @abstractmethod
    async def _get_children(self, path: str) -> list[str]: ...

    @abstractmethod
    async def _exists(self, path: str) -> bool: ...

    @abstractmethod
    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat: ...

    @abstractmethod
    async def _delete(self, path: str, expected_version: int | None) -> None: ...

    async def _batch(self, ops: list[Op]) -> list[OpResult]:
        """``ops`` name distinct paths (``batch`` cuts rounds so), so they may run in any order.
        Default: the single calls, concurrently. Backends override with multi/txn."""
        return list(await asyncio.gather(*(self._run_one(op) for op in ops)))

    async def _run_one(self, op: Op) -> OpResult:
        try:
            if isinstance(op, GetOp):
                return await self._get(op.path)
            if isinstance(op, GetChildrenOp):
                return sorted(await self._get_children(op.path))
            if isinstance(op, ExistsOp):
                return await self._exists(op.path)
            if isinstance(op, PutOp):
                return await self._put(op.path, op.value, op.expected_version, op.ephemeral, op.sequential)
            await self._delete(op.path, op.expected_version)
            return None
        except MetadataStoreError as e:
            return e

    def _check_put(self, path: str, value: Any, expected_version: int | None, sequential: bool = False) -> None:
        if sequential:  # the name is the path and a suffix: "/queue/" names "/queue/0000000007"
            paths.validate(path + "0")
        else:
            paths.validate(path)
        if path == paths.SEPARATOR and not sequential:
            raise InvalidPath(path, "the root cannot be written")
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"value for {path} must be bytes, not {type(value).__name__}")
        size = len(value)
        if size > self.max_value_size:
            raise ValueTooLarge(path, size, self.max_value_size)
        # the server limits the whole request, so a long path eats into the value's room
        request = size + len(self.url.root.encode()) + len(path.encode())
        if request > self.max_value_size + PATH_ALLOWANCE:
            raise ValueTooLarge(path, request, self.max_value_size + PATH_ALLOWANCE)
        _check_version(path, expected_version, allow_create=True)

    def _check_delete(self, path: str, expected_version: int | None) -> None:
        paths.validate(path)
        if path == paths.SEPARATOR:
            raise InvalidPath(path, "the root cannot be deleted")
        _check_version(path, expected_version, allow_create=False)

    def _impossible_version(self, op: Op) -> bool:
        """True for a compare-and-set against a version no node of this store can have (ZooKeeper
        versions are 32-bit): such a call is a ``BadVersion`` without asking the server."""
        expected = getattr(op, "expected_version", None)
        return expected is not None and expected > self.max_version


def _check_version(path: str, expected_version: int | None, *, allow_create: bool) -> None:
    if expected_version is None:
        return
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise TypeError(f"expected_version for {path} must be an int or None")
    if expected_version < (-1 if allow_create else 0):
        raise ValueError(f"expected_version {expected_version} for {path} is not valid")
