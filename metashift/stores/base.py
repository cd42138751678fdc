"""The one store interface: Pulsar's MetadataStore semantics (PIP-45), asyncio flavoured.

Everything above the store layer (gateway, participant, coordinator, Spark copy) talks to a store
only through ``MetadataStore``. Public methods check their arguments here, once, for every
backend, then call the backend's ``_``-prefixed primitive; so a bad path or an oversize value is
rejected before anything is sent and nothing is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from . import paths
from .errors import BadVersion, InvalidPath, MetadataStoreError, ValueTooLarge
from .urls import StoreURL

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stat:
    """What a store knows about a node besides its value."""

    path: str
    """The real path; for a sequential put, with the store's suffix."""
    version: int
    """0 after create, +1 per put (ZooKeeper dataVersion; etcd version - 1)."""
    creation_timestamp: int = 0
    """Milliseconds since the epoch; 0 where the store does not keep it (etcd)."""
    modification_timestamp: int = 0
    ephemeral: bool = False
    created_by_self: bool = False
    """True when this store object's own session owns the (ephemeral) node."""


class NotificationType(enum.Enum):
    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True)
class Notification:
    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    CONNECTION_LOST = "ConnectionLost"
    RECONNECTED = "Reconnected"
    SESSION_LOST = "SessionLost"
    SESSION_REESTABLISHED = "SessionReestablished"


# ---- batched operations -------------------------------------------------------------------------
# A batch is a list of independent operations sent together for speed (Pulsar batches the same
# way): each gets its own result, and one failing does not undo the others.


@dataclass(frozen=True)
class GetOp:
    path: str


@dataclass(frozen=True)
class GetChildrenOp:
    path: str


@dataclass(frozen=True)
class ExistsOp:
    path: str


@dataclass(frozen=True)
class PutOp:
    path: str
    value: bytes
    expected_version: int | None = None
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class DeleteOp:
    path: str
    expected_version: int | None = None


Op = GetOp | GetChildrenOp | ExistsOp | PutOp | DeleteOp
GetResult = tuple[bytes, Stat] | None
OpResult = GetResult | list[str] | bool | Stat | None | MetadataStoreError

# ---- bulk operations (the copy, its verification, sample data) -----------------------------------


@dataclass(frozen=True)
class NodeInfo:
    """One node as a listing (``MetadataStore.walk``) sees it."""

    path: str
    version: int
    size: int
    """Length of the value in bytes."""
    ephemeral: bool = False


@dataclass(frozen=True)
class Restore:
    """Bring ``path`` to exactly ``value`` at ``version`` (``MetadataStore.restore_many``)."""

    path: str
    value: bytes
    version: int
    current: int = -1
    """The version the node has in this store now, as read just before (-1: it does not exist)."""


#: Nodes per page of ``walk`` and per read batch of the generic implementations.
WALK_PAGE = 1000
#: Ephemeral sequential children created (then deleted) per round of ``advance_sequence_counter``.
_COUNTER_ROUND = 128
#: Name of the throw-away sequential children that ``advance_sequence_counter`` creates.
COUNTER_PROBE = "metashift-seq-"

#: Bytes of path (chroot or prefix included) that every store's limit leaves room for beside a
#: value of ``max_value_size``.
PATH_ALLOWANCE = 2048

NotificationListener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


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

    def __init__(self, url: StoreURL) -> None:
        self.url = url
        self._listeners: list[NotificationListener] = []
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

    # ---- writes ---------------------------------------------------------------------------------

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
        self._check_put(path, value, expected_version)
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
                self._check_put(op.path, op.value, op.expected_version)
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

    def add_listener(self, listener: NotificationListener) -> Callable[[], None]:
        """Call ``listener`` for every change the store sees; returns a function that removes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def add_session_listener(self, listener: SessionListener) -> Callable[[], None]:
        self._session_listeners.append(listener)
        return lambda: (
            self._session_listeners.remove(listener) if listener in self._session_listeners else None
        )

    def _notify(self, notification: Notification) -> None:
        for listener in list(self._listeners):
            try:
                listener(notification)
            except Exception:  # a listener's bug must not stop the store's event loop
                log.exception("notification listener failed for %s", notification)

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

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ---- bulk operations: the copy, its verification and sample data -----------------------------
    # Generic implementations in terms of the public API above; backends override them for speed.

    async def walk(
        self, root: str = paths.SEPARATOR, *, prune: Collection[str] = ()
    ) -> AsyncIterator[list[NodeInfo]]:
        """Every node below ``root`` (``root`` itself not included), in pages, breadth first: a
        node's parent always comes in an earlier page or earlier in the same page. Subtrees whose
        root is in ``prune`` are neither listed nor descended into. A path that only exists as the
        parent of other keys (etcd) is not listed, but its children are. Nodes that vanish while
        the walk runs are left out."""
        paths.validate(root)
        pruned = set(prune)
        frontier = [root]
        while frontier:
            next_frontier: list[str] = []
            for start in range(0, len(frontier), WALK_PAGE):
                parents = frontier[start : start + WALK_PAGE]
                listed = await self.batch([GetChildrenOp(p) for p in parents])
                children: list[str] = []
                for parent, names in zip(parents, listed, strict=True):
                    if isinstance(names, MetadataStoreError):
                        raise names
                    assert isinstance(names, list)
                    children.extend(c for c in (paths.join(parent, n) for n in names) if c not in pruned)
                for cstart in range(0, len(children), WALK_PAGE):
                    chunk = children[cstart : cstart + WALK_PAGE]
                    got = await self.batch([GetOp(c) for c in chunk])
                    page: list[NodeInfo] = []
                    for path, result in zip(chunk, got, strict=True):
                        if isinstance(result, MetadataStoreError):
                            raise result
                        if isinstance(result, tuple):
                            value, stat = result
                            page.append(NodeInfo(path, stat.version, len(value), stat.ephemeral))
                    next_frontier.extend(chunk)
                    if page:
                        yield page
            frontier = next_frontier

    async def restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        """Bring each node to exactly its ``value`` at its ``version``: create it when
        ``current`` is -1, then write until the store's own version count reaches ``version`` (no
        store lets a version be set; they count writes). The intermediate writes carry empty
        values, the last one the value. Every write is conditional on the version the previous
        one left, so a stale ``current`` gives ``BadVersion`` rather than a wrong version.
        Returns, per item, the number of writes it took, or the error that stopped it (the node
        is then left at some version between ``current`` and ``version``, and a new call with
        the version read again resumes). Paths must be distinct; parents are the caller's
        business (create them first)."""
        for item in items:
            self._check_put(item.path, item.value, None)
            if not 0 <= item.version or not -1 <= item.current <= item.version:
                raise ValueError(f"cannot restore {item.path} from version {item.current} to {item.version}")
        results: list[int | MetadataStoreError] = [0] * len(items)
        current = [item.current for item in items]
        pending = [i for i, item in enumerate(items) if item.current < item.version]
        while pending:
            ops: list[Op] = []
            for i in pending:
                item = items[i]
                value = item.value if current[i] + 1 == item.version else b""
                ops.append(PutOp(item.path, value, current[i]))
            answers = await self.batch(ops)
            still: list[int] = []
            for i, answer in zip(pending, answers, strict=True):
                if isinstance(answer, MetadataStoreError):
                    results[i] = answer
                    continue
                current[i] += 1
                count = results[i]
                assert isinstance(count, int)
                results[i] = count + 1
                if current[i] < items[i].version:
                    still.append(i)
            pending = still
        return results

    async def restore(self, path: str, value: bytes, version: int, current: int = -1) -> int:
        """``restore_many`` for one node; raises the error instead of returning it."""
        (result,) = await self.restore_many([Restore(path, bytes(value), version, current)])
        if isinstance(result, MetadataStoreError):
            raise result
        return result

    async def children_version(self, path: str) -> int | None:
        """The counter behind sequential children of ``path`` (ZooKeeper: the parent's cversion;
        etcd: the parent key's version), ``None`` when ``path`` does not exist. Backends that
        cannot read it without changing it do not implement it."""
        raise NotImplementedError(f"{type(self).__name__} cannot read a sequence counter without changing it")

    async def sequence_counter(self, parent: str) -> int:
        """The suffix the next sequential child of ``parent`` will get; every suffix this store
        handed out under ``parent`` so far is smaller. 0 when ``parent`` does not exist."""
        return await self.children_version(paths.validate(parent)) or 0

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """Make the next sequential suffix under ``parent`` at least ``at_least`` the way
        BookKeeper moves it: ephemeral sequential children created and deleted again. The
        parent's value is kept (an etcd sequential put blanks it: it is written back). May
        overshoot a little. Returns the number of writes it took."""
        paths.validate(parent)
        writes = 0
        before = await self.get(parent)
        probe = paths.join(parent, COUNTER_PROBE)
        while (counter := await self.sequence_counter(parent)) < at_least:
            n = min(at_least - counter, _COUNTER_ROUND)
            made = await self.batch([PutOp(probe, b"", None, ephemeral=True, sequential=True)] * n)
            for r in made:
                if isinstance(r, MetadataStoreError):
                    raise r
            created = [r.path for r in made if isinstance(r, Stat)]
            gone = await self.batch([DeleteOp(p) for p in created])
            for r in gone:
                if isinstance(r, MetadataStoreError):
                    raise r
            writes += len(created) * 2
        if before is not None and before[0]:
            after = await self.get(parent)
            if after is not None and after[0] != before[0]:
                await self.put(parent, before[0])
                writes += 1
        return writes

    async def compact_history(self) -> None:
        """Drop the history of old values the store keeps after a bulk write (etcd's MVCC
        revisions, which count against its quota). Nothing to do for most stores."""
        return None

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

    def _check_put(self, path: str, value: Any, expected_version: int | None) -> None:
        paths.validate(path)
        if path == paths.SEPARATOR:
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
