"""Conversions between the store layer's types and the ``metashift.v1`` messages, shared by the
gateway (agent side) and ``metashift.client``: stats, notifications, session events, and errors
with their gRPC status codes and machine-readable details."""

from __future__ import annotations

import grpc

from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores import Notification, NotificationType, SessionEvent, Stat
from metashift.stores import errors as e

#: Trailing metadata: the serialized ``metashift.v1.Error`` of a failed call, and its kind as text.
ERROR_DETAIL_KEY = "metashift-error-bin"
ERROR_KIND_KEY = "metashift-error"
ERROR_PATH_KEY = "metashift-path"
#: Request metadata naming the caller's session (needed by ephemeral puts).
SESSION_KEY = "metashift-session"


class InvalidArgument(e.MetadataStoreError, ValueError):
    """A malformed request (bad expected_version, empty batch op, undecodable message, ...)."""


class NoSession(e.MetadataStoreError):
    """An ephemeral put without a live session: there is nothing its lifetime could follow."""


class Internal(e.MetadataStoreError):
    """The agent failed in a way that is not the caller's fault (a bug or a refused credential)."""


# kind name, enum, status code; the first matching class wins (subclasses before their bases)
_KINDS: list[tuple[type[e.MetadataStoreError], str, pb.ErrorKind, grpc.StatusCode]] = [
    (e.AlreadyExists, "AlreadyExists", pb.ALREADY_EXISTS, grpc.StatusCode.ALREADY_EXISTS),
    (e.BadVersion, "BadVersion", pb.BAD_VERSION, grpc.StatusCode.FAILED_PRECONDITION),
    (e.NotFound, "NotFound", pb.NOT_FOUND, grpc.StatusCode.NOT_FOUND),
    (e.NotEmpty, "NotEmpty", pb.NOT_EMPTY, grpc.StatusCode.FAILED_PRECONDITION),
    (e.ValueTooLarge, "ValueTooLarge", pb.VALUE_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT),
    (e.InvalidPath, "InvalidPath", pb.INVALID_PATH, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidArgument, "InvalidArgument", pb.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT),
    (NoSession, "NoSession", pb.NO_SESSION, grpc.StatusCode.FAILED_PRECONDITION),
    (e.HeldForMigration, "HeldForMigration", pb.HELD_FOR_MIGRATION, grpc.StatusCode.UNAVAILABLE),
    (e.StoreFull, "StoreFull", pb.STORE_FULL, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (e.StoreUnavailable, "StoreUnavailable", pb.STORE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE),
    (e.AuthFailed, "AuthFailed", pb.AUTH_FAILED, grpc.StatusCode.INTERNAL),
    (e.MetadataStoreError, "Internal", pb.INTERNAL, grpc.StatusCode.INTERNAL),
]
_NAME_BY_KIND = {kind: name for _, name, kind, _ in _KINDS}


def kind_name(kind: pb.ErrorKind) -> str:
    return _NAME_BY_KIND.get(kind, "Internal")


def error_to_pb(err: e.MetadataStoreError) -> tuple[pb.Error, grpc.StatusCode]:
    for cls, _, kind, code in _KINDS:
        if isinstance(err, cls):
            detail = pb.Error(kind=kind, path=err.path or "", message=str(err))
            if isinstance(err, e.ValueTooLarge):
                detail.size = err.size
                detail.limit = err.limit
            return detail, code
    raise AssertionError("unreachable: MetadataStoreError matches the last entry")


def error_from_pb(detail: pb.Error) -> e.MetadataStoreError:
    path = detail.path or None
    message = _strip_path(detail.message, path)
    kind = detail.kind
    if kind == pb.ALREADY_EXISTS:
        return e.AlreadyExists(detail.path)
    if kind == pb.BAD_VERSION:
        return e.BadVersion(detail.path)
    if kind == pb.NOT_FOUND:
        return e.NotFound(detail.path)
    if kind == pb.NOT_EMPTY:
        return e.NotEmpty(detail.path)
    if kind == pb.VALUE_TOO_LARGE:
        return e.ValueTooLarge(detail.path, detail.size, detail.limit)
    if kind == pb.INVALID_PATH:
        err = e.InvalidPath(detail.path, "")
        err.args = (detail.message,)
        return err
    table: dict[pb.ErrorKind, type[e.MetadataStoreError]] = {
        pb.INVALID_ARGUMENT: InvalidArgument,
        pb.NO_SESSION: NoSession,
        pb.HELD_FOR_MIGRATION: e.HeldForMigration,
        pb.STORE_FULL: e.StoreFull,
        pb.STORE_UNAVAILABLE: e.StoreUnavailable,
        pb.AUTH_FAILED: e.AuthFailed,
    }
    cls = table.get(kind, Internal)
    return cls(message, path)


def _strip_path(message: str, path: str | None) -> str:
    suffix = f": {path}"
    return message[: -len(suffix)] if path is not None and message.endswith(suffix) else message


def stat_to_pb(stat: Stat, created_by_self: bool) -> pb.Stat:
    return pb.Stat(
        path=stat.path,
        version=stat.version,
        creation_timestamp=stat.creation_timestamp,
        modification_timestamp=stat.modification_timestamp,
        ephemeral=stat.ephemeral,
        created_by_self=created_by_self,
    )


def stat_from_pb(s: pb.Stat) -> Stat:
    return Stat(
        path=s.path,
        version=s.version,
        creation_timestamp=s.creation_timestamp,
        modification_timestamp=s.modification_timestamp,
        ephemeral=s.ephemeral,
        created_by_self=s.created_by_self,
    )


NOTIFICATION_TO_PB = {
    NotificationType.CREATED: pb.CREATED,
    NotificationType.MODIFIED: pb.MODIFIED,
    NotificationType.DELETED: pb.DELETED,
    NotificationType.CHILDREN_CHANGED: pb.CHILDREN_CHANGED,
}
NOTIFICATION_FROM_PB = {v: k for k, v in NOTIFICATION_TO_PB.items()}

SESSION_EVENT_TO_PB = {
    SessionEvent.CONNECTION_LOST: pb.CONNECTION_LOST,
    SessionEvent.RECONNECTED: pb.RECONNECTED,
    SessionEvent.SESSION_LOST: pb.SESSION_LOST,
    SessionEvent.SESSION_REESTABLISHED: pb.SESSION_REESTABLISHED,
}
SESSION_EVENT_FROM_PB = {v: k for k, v in SESSION_EVENT_TO_PB.items()}


def notification_from_pb(n: pb.Notification) -> Notification | None:
    kind = NOTIFICATION_FROM_PB.get(n.type)
    return None if kind is None else Notification(kind, n.path)
