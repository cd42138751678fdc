"""The one store interface: Pulsar's MetadataStore semantics (PIP-45), asyncio flavoured.

Everything above the store layer (gateway, participant, coordinator, Spark copy) talks to a store
only through ``MetadataStore``. Public methods check their arguments here, once, for every
backend, then call the backend's ``_``-prefixed primitive; so a bad path or an oversize value is
rejected before anything is sent and nothing is written.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from . import paths
from .errors import InvalidPath, MetadataStoreError, ValueTooLarge
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

NotificationListener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


class MetadataStore(ABC):
    """An open connection to one metadata store, with one session.

    Ephemeral nodes created through this object live as long as its session: until ``close()``,
    or until the server expires the session.
    """

    #: Largest value, in bytes, that ``put`` accepts on this store.
    max_value_size: int

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
        return await self._put(path, bytes(value), expected_version, ephemeral, sequential)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete ``path``: ``NotFound`` when missing, ``BadVersion`` when the version differs."""
        paths.validate(path)
        if path == paths.SEPARATOR:
            raise InvalidPath(path, "the root cannot be deleted")
        _check_version(path, expected_version, allow_create=False)
        await self._delete(path, expected_version)

    async def batch(self, ops: Sequence[Op]) -> list[OpResult]:
        """Run independent operations together; each result is the value the single call would
        return, or the ``MetadataStoreError`` it would raise. Arguments are checked first: one bad
        operation rejects the whole batch before anything is sent."""
        for op in ops:
            if isinstance(op, PutOp):
                self._check_put(op.path, op.value, op.expected_version)
            elif isinstance(op, DeleteOp):
                paths.validate(op.path)
                _check_version(op.path, op.expected_version, allow_create=False)
            else:
                paths.validate(op.path)
        return await self._batch(list(ops))

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
        """Default: the single calls, concurrently. Backends override with multi/txn."""
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
        if len(value) > self.max_value_size:
            raise ValueTooLarge(path, len(value), self.max_value_size)
        _check_version(path, expected_version, allow_create=True)


def _check_version(path: str, expected_version: int | None, *, allow_create: bool) -> None:
    if expected_version is None:
        return
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise TypeError(f"expected_version for {path} must be an int or None")
    if expected_version < (-1 if allow_create else 0):
        raise ValueError(f"expected_version {expected_version} for {path} is not valid")
