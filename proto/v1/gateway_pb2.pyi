from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_KIND_UNSPECIFIED: _ClassVar[ErrorKind]
    BAD_VERSION: _ClassVar[ErrorKind]
    NOT_FOUND: _ClassVar[ErrorKind]
    ALREADY_EXISTS: _ClassVar[ErrorKind]
    VALUE_TOO_LARGE: _ClassVar[ErrorKind]
    INVALID_PATH: _ClassVar[ErrorKind]
    HELD_FOR_MIGRATION: _ClassVar[ErrorKind]
    NOT_EMPTY: _ClassVar[ErrorKind]
    STORE_UNAVAILABLE: _ClassVar[ErrorKind]
    STORE_FULL: _ClassVar[ErrorKind]
    INVALID_ARGUMENT: _ClassVar[ErrorKind]
    NO_SESSION: _ClassVar[ErrorKind]
    AUTH_FAILED: _ClassVar[ErrorKind]
    INTERNAL: _ClassVar[ErrorKind]
    WRITE_OUTCOME_UNKNOWN: _ClassVar[ErrorKind]
    UNAUTHENTICATED: _ClassVar[ErrorKind]

class NotificationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NOTIFICATION_TYPE_UNSPECIFIED: _ClassVar[NotificationType]
    CREATED: _ClassVar[NotificationType]
    MODIFIED: _ClassVar[NotificationType]
    DELETED: _ClassVar[NotificationType]
    CHILDREN_CHANGED: _ClassVar[NotificationType]

class SessionEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_EVENT_TYPE_UNSPECIFIED: _ClassVar[SessionEventType]
    CONNECTION_LOST: _ClassVar[SessionEventType]
    RECONNECTED: _ClassVar[SessionEventType]
    SESSION_LOST: _ClassVar[SessionEventType]
    SESSION_REESTABLISHED: _ClassVar[SessionEventType]
ERROR_KIND_UNSPECIFIED: ErrorKind
BAD_VERSION: ErrorKind
NOT_FOUND: ErrorKind
ALREADY_EXISTS: ErrorKind
VALUE_TOO_LARGE: ErrorKind
INVALID_PATH: ErrorKind
HELD_FOR_MIGRATION: ErrorKind
NOT_EMPTY: ErrorKind
STORE_UNAVAILABLE: ErrorKind
STORE_FULL: ErrorKind
INVALID_ARGUMENT: ErrorKind
NO_SESSION: ErrorKind
AUTH_FAILED: ErrorKind
INTERNAL: ErrorKind
WRITE_OUTCOME_UNKNOWN: ErrorKind
UNAUTHENTICATED: ErrorKind
NOTIFICATION_TYPE_UNSPECIFIED: NotificationType
CREATED: NotificationType
MODIFIED: NotificationType
DELETED: NotificationType
CHILDREN_CHANGED: NotificationType
SESSION_EVENT_TYPE_UNSPECIFIED: SessionEventType
CONNECTION_LOST: SessionEventType
RECONNECTED: SessionEventType
SESSION_LOST: SessionEventType
SESSION_REESTABLISHED: SessionEventType

class Stat(_message.Message):
    __slots__ = ("path", "version", "creation_timestamp", "modification_timestamp", "ephemeral", "created_by_self")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATION_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MODIFICATION_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_SELF_FIELD_NUMBER: _ClassVar[int]
    path: str
    version: int
    creation_timestamp: int
    modification_timestamp: int
    ephemeral: bool
    created_by_self: bool
    def __init__(self, path: _Optional[str] = ..., version: _Optional[int] = ..., creation_timestamp: _Optional[int] = ..., modification_timestamp: _Optional[int] = ..., ephemeral: _Optional[bool] = ..., created_by_self: _Optional[bool] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("kind", "path", "message", "size", "limit", "nothing_written")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NOTHING_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    kind: ErrorKind
    path: str
    message: str
    size: int
    limit: int
    nothing_written: bool
    def __init__(self, kind: _Optional[_Union[ErrorKind, str]] = ..., path: _Optional[str] = ..., message: _Optional[str] = ..., size: _Optional[int] = ..., limit: _Optional[int] = ..., nothing_written: _Optional[bool] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("found", "value", "stat")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    STAT_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    stat: Stat
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ..., stat: _Optional[_Union[Stat, _Mapping]] = ...) -> None: ...

class GetChildrenRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class GetChildrenResponse(_message.Message):
    __slots__ = ("children",)
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    children: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, children: _Optional[_Iterable[str]] = ...) -> None: ...

class ExistsRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class ExistsResponse(_message.Message):
    __slots__ = ("exists",)
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    def __init__(self, exists: _Optional[bool] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("path", "value", "expected_version", "ephemeral", "sequential")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    SEQUENTIAL_FIELD_NUMBER: _ClassVar[int]
    path: str
    value: bytes
    expected_version: int
    ephemeral: bool
    sequential: bool
    def __init__(self, path: _Optional[str] = ..., value: _Optional[bytes] = ..., expected_version: _Optional[int] = ..., ephemeral: _Optional[bool] = ..., sequential: _Optional[bool] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("stat",)
    STAT_FIELD_NUMBER: _ClassVar[int]
    stat: Stat
    def __init__(self, stat: _Optional[_Union[Stat, _Mapping]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("path", "expected_version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    expected_version: int
    def __init__(self, path: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Op(_message.Message):
    __slots__ = ("get", "get_children", "exists", "put", "delete")
    GET_FIELD_NUMBER: _ClassVar[int]
    GET_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    get: GetRequest
    get_children: GetChildrenRequest
    exists: ExistsRequest
    put: PutRequest
    delete: DeleteRequest
    def __init__(self, get: _Optional[_Union[GetRequest, _Mapping]] = ..., get_children: _Optional[_Union[GetChildrenRequest, _Mapping]] = ..., exists: _Optional[_Union[ExistsRequest, _Mapping]] = ..., put: _Optional[_Union[PutRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteRequest, _Mapping]] = ...) -> None: ...

class OpResult(_message.Message):
    __slots__ = ("get", "get_children", "exists", "put", "delete", "error")
    GET_FIELD_NUMBER: _ClassVar[int]
    GET_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    get: GetResponse
    get_children: GetChildrenResponse
    exists: ExistsResponse
    put: PutResponse
    delete: DeleteResponse
    error: Error
    def __init__(self, get: _Optional[_Union[GetResponse, _Mapping]] = ..., get_children: _Optional[_Union[GetChildrenResponse, _Mapping]] = ..., exists: _Optional[_Union[ExistsResponse, _Mapping]] = ..., put: _Optional[_Union[PutResponse, _Mapping]] = ..., delete: _Optional[_Union[DeleteResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[Op]
    def __init__(self, ops: _Optional[_Iterable[_Union[Op, _Mapping]]] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[OpResult]
    def __init__(self, results: _Optional[_Iterable[_Union[OpResult, _Mapping]]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("path_prefix",)
    PATH_PREFIX_FIELD_NUMBER: _ClassVar[int]
    path_prefix: str
    def __init__(self, path_prefix: _Optional[str] = ...) -> None: ...

class Notification(_message.Message):
    __slots__ = ("type", "path")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    type: NotificationType
    path: str
    def __init__(self, type: _Optional[_Union[NotificationType, str]] = ..., path: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("ready", "notification")
    READY_FIELD_NUMBER: _ClassVar[int]
    NOTIFICATION_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    notification: Notification
    def __init__(self, ready: _Optional[bool] = ..., notification: _Optional[_Union[Notification, _Mapping]] = ...) -> None: ...

class CallRequest(_message.Message):
    __slots__ = ("id", "timeout_ms", "get", "get_children", "exists", "put", "delete", "batch")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    GET_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    id: int
    timeout_ms: int
    get: GetRequest
    get_children: GetChildrenRequest
    exists: ExistsRequest
    put: PutRequest
    delete: DeleteRequest
    batch: BatchRequest
    def __init__(self, id: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., get: _Optional[_Union[GetRequest, _Mapping]] = ..., get_children: _Optional[_Union[GetChildrenRequest, _Mapping]] = ..., exists: _Optional[_Union[ExistsRequest, _Mapping]] = ..., put: _Optional[_Union[PutRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteRequest, _Mapping]] = ..., batch: _Optional[_Union[BatchRequest, _Mapping]] = ...) -> None: ...

class CallResponse(_message.Message):
    __slots__ = ("id", "get", "get_children", "exists", "put", "delete", "batch", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    GET_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    get: GetResponse
    get_children: GetChildrenResponse
    exists: ExistsResponse
    put: PutResponse
    delete: DeleteResponse
    batch: BatchResponse
    error: Error
    def __init__(self, id: _Optional[int] = ..., get: _Optional[_Union[GetResponse, _Mapping]] = ..., get_children: _Optional[_Union[GetChildrenResponse, _Mapping]] = ..., exists: _Optional[_Union[ExistsResponse, _Mapping]] = ..., put: _Optional[_Union[PutResponse, _Mapping]] = ..., delete: _Optional[_Union[DeleteResponse, _Mapping]] = ..., batch: _Optional[_Union[BatchResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("timeout_ms", "client_name")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    client_name: str
    def __init__(self, timeout_ms: _Optional[int] = ..., client_name: _Optional[str] = ...) -> None: ...

class KeepAlive(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class CloseSession(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("hello", "keep_alive", "close")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    keep_alive: KeepAlive
    close: CloseSession
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAlive, _Mapping]] = ..., close: _Optional[_Union[CloseSession, _Mapping]] = ...) -> None: ...

class SessionStarted(_message.Message):
    __slots__ = ("session_id", "timeout_ms", "max_value_size", "node_id", "role")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_VALUE_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    timeout_ms: int
    max_value_size: int
    node_id: str
    role: str
    def __init__(self, session_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., max_value_size: _Optional[int] = ..., node_id: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("type",)
    TYPE_FIELD_NUMBER: _ClassVar[int]
    type: SessionEventType
    def __init__(self, type: _Optional[_Union[SessionEventType, str]] = ...) -> None: ...

class SessionClosed(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("started", "keep_alive", "event", "closed")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    started: SessionStarted
    keep_alive: KeepAlive
    event: SessionEvent
    closed: SessionClosed
    def __init__(self, started: _Optional[_Union[SessionStarted, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAlive, _Mapping]] = ..., event: _Optional[_Union[SessionEvent, _Mapping]] = ..., closed: _Optional[_Union[SessionClosed, _Mapping]] = ...) -> None: ...
