"""What travels between the agent and its clients, written once for both sides (the gateway and
``metashift.client``, which needs nothing of the agent package): the gRPC options, the bearer
token's metadata, the error <-> status table, and the conversions between the store layer's types
(stats, operations, results, notifications, session events) and the ``metashift.v1`` messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from metashift.proto.errors import (
    HeldForMigration,
    Internal,
    InvalidArgument,
    NoSession,
    Unauthenticated,
    WriteOutcomeUnknown,
)
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores import (
    DeleteOp,
    ExistsOp,
    GetChildrenOp,
    GetOp,
    Notification,
    NotificationType,
    Op,
    OpResult,
    PutOp,
    SessionEvent,
    Stat,
    paths,
)
from metashift.stores import errors as e

#: Trailing metadata: the serialized ``metashift.v1.Error`` of a failed call, and its kind as text.
ERROR_DETAIL_KEY = "metashift-error-bin"
ERROR_KIND_KEY = "metashift-error"
#: Trailing metadata: whether the failed call may have written anything (``OUTCOME_*``).
OUTCOME_KEY = "metashift-outcome"
OUTCOME_NOT_WRITTEN = "not-written"
OUTCOME_UNKNOWN = "unknown"
#: Request metadata presenting the caller's bearer token (the agent's ``auth.token_file``).
AUTH_METADATA_KEY = "authorization"
#: Request metadata naming the caller's session (needed by ephemeral puts).
SESSION_KEY = "metashift-session"
#: Longest path the agent and its client accept, in bytes of UTF-8: a longer one is InvalidPath,
#: refused before anything is sent (so that every error fits the 8 KiB metadata limit of gRPC
#: clients, grpc-java's default too).
MAX_PATH_BYTES = 2048
#: An error's message (without its path) is cut to this many characters in the answer.
MAX_MESSAGE_CHARS = 400
#: The path as ``grpc-message`` (human-readable) shows it; the detail carries it whole, once.
_SHORT_PATH_CHARS = 120

def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that presents ``token``."""
    return ((AUTH_METADATA_KEY, f"Bearer {token}"),)


# ---- gRPC options (client channel and agent server) -----------------------------------------------

#: Largest message either side sends or accepts (a batch of values, a large value).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_MESSAGE_LIMITS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
#: The client's channel: message limits, quick reconnects to a restarted agent, keep-alive pings.
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    *_MESSAGE_LIMITS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    # not a backoff, despite its name: the least time a connection attempt gets to finish its
    # TCP and HTTP/2 handshake (gRPC's MIN_CONNECT_TIMEOUT). At 100 ms, attempts on a loaded
    # machine failed with "connection attempt timed out before receiving SETTINGS frame"
    ("grpc.min_reconnect_backoff_ms", 10_000),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]
#: The agent's server: message limits; never share a port with another process.
SERVER_OPTIONS: list[tuple[str, Any]] = [*_MESSAGE_LIMITS, ("grpc.so_reuseport", 0)]

# ---- errors: one table, read both ways --------------------------------------------------------------


@dataclass(frozen=True)
class ErrorCode:
    """One row of the error table: the Python class, its kind (enum and text), its status code."""

    cls: type[e.MetadataStoreError]
    name: str
    kind: pb.ErrorKind
    status: grpc.StatusCode


#: Agent -> client: the first row whose class the error is an instance of (subclasses before their
#: bases). Client -> Python: the row of the kind. The last row catches every other error.
ERRORS: tuple[ErrorCode, ...] = (
    ErrorCode(e.AlreadyExists, "AlreadyExists", pb.ALREADY_EXISTS, grpc.StatusCode.ALREADY_EXISTS),
    ErrorCode(e.BadVersion, "BadVersion", pb.BAD_VERSION, grpc.StatusCode.FAILED_PRECONDITION),
    ErrorCode(e.NotFound, "NotFound", pb.NOT_FOUND, grpc.StatusCode.NOT_FOUND),
    ErrorCode(e.NotEmpty, "NotEmpty", pb.NOT_EMPTY, grpc.StatusCode.FAILED_PRECONDITION),
    ErrorCode(e.ValueTooLarge, "ValueTooLarge", pb.VALUE_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT),
    ErrorCode(e.InvalidPath, "InvalidPath", pb.INVALID_PATH, grpc.StatusCode.INVALID_ARGUMENT),
    ErrorCode(InvalidArgument, "InvalidArgument", pb.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT),
    ErrorCode(NoSession, "NoSession", pb.NO_SESSION, grpc.StatusCode.FAILED_PRECONDITION),
    ErrorCode(HeldForMigration, "HeldForMigration", pb.HELD_FOR_MIGRATION, grpc.StatusCode.UNAVAILABLE),
    ErrorCode(WriteOutcomeUnknown, "WriteOutcomeUnknown", pb.WRITE_OUTCOME_UNKNOWN, grpc.StatusCode.UNKNOWN),
    ErrorCode(e.StoreFull, "StoreFull", pb.STORE_FULL, grpc.StatusCode.RESOURCE_EXHAUSTED),
    ErrorCode(e.StoreUnavailable, "StoreUnavailable", pb.STORE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE),
    ErrorCode(Unauthenticated, "Unauthenticated", pb.UNAUTHENTICATED, grpc.StatusCode.UNAUTHENTICATED),
    ErrorCode(e.AuthFailed, "AuthFailed", pb.AUTH_FAILED, grpc.StatusCode.INTERNAL),
    ErrorCode(Internal, "Internal", pb.INTERNAL, grpc.StatusCode.INTERNAL),
)
_INTERNAL = ERRORS[-1]
_BY_KIND = {row.kind: row for row in ERRORS}

#: Statuses that reach a client without a metashift detail (made by gRPC itself: the agent is
#: unreachable, the caller's deadline passed, the call was cancelled, an auth layer refused it).
STATUS_WITHOUT_DETAIL: dict[grpc.StatusCode, type[e.MetadataStoreError]] = {
    grpc.StatusCode.UNAVAILABLE: e.StoreUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: e.StoreUnavailable,
    grpc.StatusCode.CANCELLED: e.StoreUnavailable,
    grpc.StatusCode.UNAUTHENTICATED: e.AuthFailed,
    grpc.StatusCode.PERMISSION_DENIED: e.AuthFailed,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
}
#: Of those, the ones after which a write's outcome is unknown (it may have reached the agent).
_WRITE_MAY_HAVE_HAPPENED = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
})


def error_code(err: e.MetadataStoreError) -> ErrorCode:
    """The table's row for ``err``."""
    for row in ERRORS:
        if isinstance(err, row.cls):
            return row
    return _INTERNAL  # a MetadataStoreError of no row's class


def kind_name(kind: pb.ErrorKind) -> str:
    return _BY_KIND.get(kind, _INTERNAL).name


def check_path(path: str, sequential: bool = False) -> str:
    """``path`` if it is valid and within ``MAX_PATH_BYTES``, else ``InvalidPath``. A sequential
    put's path is checked with a suffix after it: "/queue/" names "/queue/0000000007"."""
    if sequential:
        paths.validate(path + "0")
    else:
        paths.validate(path)
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise e.InvalidPath(path, f"{size} bytes long, over the limit of {MAX_PATH_BYTES}")
    return path


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _clip_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "\u2026"


def error_to_pb(err: e.MetadataStoreError, *, read: bool = False) -> tuple[pb.Error, grpc.StatusCode]:
    """The detail and status of ``err``; ``read``: the call was a read, it wrote nothing. The path
    is carried once, whole (cut only when it is itself over the limit); the message without it,
    cut to ``MAX_MESSAGE_CHARS``."""
    row = error_code(err)
    nothing_written = read or not err.write_may_have_happened
    detail = pb.Error(
        kind=row.kind,
        path=_clip_bytes(err.path or "", MAX_PATH_BYTES),
        message=_clip(strip_path(str(err), err.path), MAX_MESSAGE_CHARS),
        nothing_written=nothing_written,
    )
    if isinstance(err, e.ValueTooLarge):
        detail.size = err.size
        detail.limit = err.limit
    return detail, row.status


def error_from_pb(detail: pb.Error) -> e.MetadataStoreError:
    """The Python error of an agent's detail: the class of its kind, with the agent's message."""
    cls = _BY_KIND.get(detail.kind, _INTERNAL).cls
    path = detail.path or None
    err = cls.__new__(cls)
    e.MetadataStoreError.__init__(err, strip_path(detail.message, path), path)
    if isinstance(err, e.ValueTooLarge):
        err.size, err.limit = detail.size, detail.limit
    err.write_may_have_happened = not detail.nothing_written
    return err


def error_from_status(code: grpc.StatusCode, message: str, path: str | None, *, write: bool) -> e.MetadataStoreError:
    """The Python error of a failed call that carries no metashift detail; ``write``: the call
    asked for a write (whose outcome is then unknown unless the status rules that out)."""
    if write and code in _WRITE_MAY_HAVE_HAPPENED:
        return WriteOutcomeUnknown(message, path)
    err = STATUS_WITHOUT_DETAIL.get(code, Internal)(message, path)
    err.write_may_have_happened = write and err.write_may_have_happened
    return err


def outcome(detail: pb.Error) -> str:
    """The ``metashift-outcome`` trailer's value for ``detail``."""
    return OUTCOME_NOT_WRITTEN if detail.nothing_written else OUTCOME_UNKNOWN


def trailers(detail: pb.Error) -> tuple[tuple[str, str | bytes], ...]:
    """The trailing metadata of a call that failed with ``detail`` (the path only in the detail)."""
    return (
        (ERROR_DETAIL_KEY, detail.SerializeToString()),
        (ERROR_KIND_KEY, kind_name(detail.kind)),
        (OUTCOME_KEY, outcome(detail)),
    )


def status_message(detail: pb.Error) -> str:
    """The human-readable ``grpc-message`` of ``detail``: printable ASCII, the path shortened."""
    text = detail.message
    if detail.path:
        text = f"{text}: {_clip(detail.path, _SHORT_PATH_CHARS)}"
    return _clip(_ascii(text), MAX_MESSAGE_CHARS + _SHORT_PATH_CHARS + 8)


def _ascii(text: str) -> str:
    """Metadata values must be printable ASCII: escape the rest."""
    return text if text.isascii() and text.isprintable() else text.encode("unicode_escape").decode("ascii")


def strip_path(message: str, path: str | None) -> str:
    suffix = f": {path}"
    return message[: -len(suffix)] if path is not None and message.endswith(suffix) else message


# ---- stats, notifications, session events ----------------------------------------------------------


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


# ---- operations and their results --------------------------------------------------------------------


def put_to_pb(op: PutOp) -> pb.PutRequest:
    return pb.PutRequest(
        path=op.path, value=op.value, expected_version=op.expected_version,
        ephemeral=op.ephemeral, sequential=op.sequential,
    )


def put_from_pb(req: pb.PutRequest) -> PutOp:
    expected = req.expected_version if req.HasField("expected_version") else None
    return PutOp(req.path, req.value, expected, req.ephemeral, req.sequential)


def delete_to_pb(op: DeleteOp) -> pb.DeleteRequest:
    return pb.DeleteRequest(path=op.path, expected_version=op.expected_version)


def delete_from_pb(req: pb.DeleteRequest) -> DeleteOp:
    return DeleteOp(req.path, req.expected_version if req.HasField("expected_version") else None)


def op_to_pb(op: Op) -> pb.Op:
    if isinstance(op, GetOp):
        return pb.Op(get=pb.GetRequest(path=op.path))
    if isinstance(op, GetChildrenOp):
        return pb.Op(get_children=pb.GetChildrenRequest(path=op.path))
    if isinstance(op, ExistsOp):
        return pb.Op(exists=pb.ExistsRequest(path=op.path))
    if isinstance(op, PutOp):
        return pb.Op(put=put_to_pb(op))
    return pb.Op(delete=delete_to_pb(op))


def op_from_pb(op: pb.Op, index: int) -> Op:
    """The store operation of a batch's ``op`` (unchecked); ``InvalidArgument`` when it is empty."""
    kind = op.WhichOneof("op")
    if kind == "get":
        return GetOp(op.get.path)
    if kind == "get_children":
        return GetChildrenOp(op.get_children.path)
    if kind == "exists":
        return ExistsOp(op.exists.path)
    if kind == "put":
        return put_from_pb(op.put)
    if kind == "delete":
        return delete_from_pb(op.delete)
    raise InvalidArgument(f"batch operation {index} is empty")


def is_write(op: Op) -> bool:
    return isinstance(op, PutOp | DeleteOp)


def result_to_pb(op: Op, result: OpResult, stat_to: Callable[[Stat], pb.Stat]) -> pb.OpResult:
    """One batch result as the agent sends it; ``stat_to`` makes the caller's view of a stat."""
    if isinstance(result, e.MetadataStoreError):
        return pb.OpResult(error=error_to_pb(result, read=not is_write(op))[0])
    if isinstance(op, GetOp):
        if result is None:
            return pb.OpResult(get=pb.GetResponse(found=False))
        assert isinstance(result, tuple)
        return pb.OpResult(get=pb.GetResponse(found=True, value=result[0], stat=stat_to(result[1])))
    if isinstance(op, GetChildrenOp):
        assert isinstance(result, list)
        return pb.OpResult(get_children=pb.GetChildrenResponse(children=result))
    if isinstance(op, ExistsOp):
        return pb.OpResult(exists=pb.ExistsResponse(exists=bool(result)))
    if isinstance(op, PutOp):
        assert isinstance(result, Stat)
        return pb.OpResult(put=pb.PutResponse(stat=stat_to(result)))
    return pb.OpResult(delete=pb.DeleteResponse())


def result_from_pb(op: Op, result: pb.OpResult) -> OpResult:
    """One batch result as the client reads it."""
    kind = result.WhichOneof("result")
    if kind == "error":
        return error_from_pb(result.error)
    if kind == "get":
        r = result.get
        return (r.value, stat_from_pb(r.stat)) if r.found else None
    if kind == "get_children":
        return list(result.get_children.children)
    if kind == "exists":
        return bool(result.exists.exists)
    if kind == "put":
        return stat_from_pb(result.put.stat)
    if kind == "delete":
        return None
    return Internal(f"the agent sent no result for {type(op).__name__} {op.path}")
