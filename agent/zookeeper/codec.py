"""ZooKeeper's client wire protocol (jute): primitives, opcodes, error codes, and the records a
3.5-3.9 client and server exchange. Pure encoding; no I/O, no store.

Framing: every packet is a 4-byte big-endian length, then the record(s). The first packet of a
connection is a ``ConnectRequest`` (no header); after it, requests are ``RequestHeader`` + body and
replies ``ReplyHeader`` + body (no body when ``err`` is not 0).
"""

from __future__ import annotations

import builtins
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class DecodeError(Exception):
    """A packet that does not decode as the record it should be."""


# ---- opcodes (ZooDefs.OpCode) -------------------------------------------------------------------


class Op:
    NOTIFICATION = 0
    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    SYNC = 9
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    RECONFIG = 16
    CHECK_WATCHES = 17
    REMOVE_WATCHES = 18
    CREATE_CONTAINER = 19
    DELETE_CONTAINER = 20
    CREATE_TTL = 21
    MULTI_READ = 22
    AUTH = 100
    SET_WATCHES = 101
    SASL = 102
    GET_EPHEMERALS = 103
    GET_ALL_CHILDREN_NUMBER = 104
    SET_WATCHES2 = 105
    ADD_WATCH = 106
    WHO_AM_I = 107
    CREATE_SESSION = -10
    CLOSE_SESSION = -11
    ERROR = -1


# ---- error codes (KeeperException.Code) ---------------------------------------------------------


class Err:
    OK = 0
    SYSTEMERROR = -1
    RUNTIMEINCONSISTENCY = -2
    DATAINCONSISTENCY = -3
    CONNECTIONLOSS = -4
    MARSHALLINGERROR = -5
    UNIMPLEMENTED = -6
    OPERATIONTIMEOUT = -7
    BADARGUMENTS = -8
    UNKNOWNSESSION = -12
    APIERROR = -100
    NONODE = -101
    NOAUTH = -102
    BADVERSION = -103
    NOCHILDRENFOREPHEMERALS = -108
    NODEEXISTS = -110
    NOTEMPTY = -111
    SESSIONEXPIRED = -112
    INVALIDCALLBACK = -113
    INVALIDACL = -114
    AUTHFAILED = -115
    SESSIONMOVED = -118
    NOTREADONLY = -119
    NOWATCHER = -121
    REQUESTTIMEOUT = -122


class CreateMode:
    PERSISTENT = 0
    EPHEMERAL = 1
    PERSISTENT_SEQUENTIAL = 2
    EPHEMERAL_SEQUENTIAL = 3
    CONTAINER = 4
    PERSISTENT_WITH_TTL = 5
    PERSISTENT_SEQUENTIAL_WITH_TTL = 6

    @staticmethod
    def ephemeral(flags: int) -> bool:
        return flags in (CreateMode.EPHEMERAL, CreateMode.EPHEMERAL_SEQUENTIAL)

    @staticmethod
    def sequential(flags: int) -> bool:
        return flags in (
            CreateMode.PERSISTENT_SEQUENTIAL, CreateMode.EPHEMERAL_SEQUENTIAL, CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL
        )


class EventType:
    NONE = -1
    NODE_CREATED = 1
    NODE_DELETED = 2
    NODE_DATA_CHANGED = 3
    NODE_CHILDREN_CHANGED = 4
    DATA_WATCH_REMOVED = 5
    CHILD_WATCH_REMOVED = 6
    PERSISTENT_WATCH_REMOVED = 7


class KeeperState:
    DISCONNECTED = 0
    SYNC_CONNECTED = 3
    AUTH_FAILED = 4
    CONNECTED_READ_ONLY = 5
    EXPIRED = -112
    CLOSED = 7


class WatcherType:
    CHILDREN = 1
    DATA = 2
    ANY = 3


class AddWatchMode:
    PERSISTENT = 0
    PERSISTENT_RECURSIVE = 1


class Perms:
    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


#: Special xids of packets outside the request/response order.
XID_WATCH_EVENT = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8

# ---- primitives ---------------------------------------------------------------------------------

_INT = struct.Struct("!i")
_LONG = struct.Struct("!q")
_BOOL = struct.Struct("!B")
_HEADER = struct.Struct("!ii")
_REPLY = struct.Struct("!iqi")
_STAT = struct.Struct("!qqqqiiiqiiq")
_MULTI_HEADER = struct.Struct("!iBi")


class Reader:
    """Reads jute primitives from one packet."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _take(self, s: struct.Struct) -> Any:
        try:
            value = s.unpack_from(self.data, self.pos)
        except struct.error:
            raise DecodeError(f"packet ends at byte {len(self.data)}, a field needs {s.size} more") from None
        self.pos += s.size
        return value[0] if len(value) == 1 else value

    def int(self) -> builtins.int:
        return int(self._take(_INT))

    def long(self) -> builtins.int:
        return int(self._take(_LONG))

    def bool(self) -> bool:
        return bool(self._take(_BOOL))

    def buffer(self) -> bytes | None:
        n = self.int()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise DecodeError(f"a buffer of {n} bytes runs past the end of the packet")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def string(self) -> str:
        raw = self.buffer()
        if raw is None:
            return ""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"a string is not UTF-8: {e}") from None

    def strings(self) -> list[str]:
        n = self.int()
        if n > len(self.data):
            raise DecodeError(f"a vector of {n} entries cannot fit in the packet")
        return [self.string() for _ in range(max(n, 0))]

    def acls(self) -> list[ACL]:
        n = self.int()
        if n > len(self.data):
            raise DecodeError(f"a vector of {n} ACLs cannot fit in the packet")
        return [ACL(self.int(), self.string(), self.string()) for _ in range(max(n, 0))]

    def remaining(self) -> builtins.int:
        return len(self.data) - self.pos


class Writer:
    """Builds one packet of jute primitives."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def int(self, v: builtins.int) -> Writer:
        self.out += _INT.pack(v)
        return self

    def long(self, v: builtins.int) -> Writer:
        self.out += _LONG.pack(v)
        return self

    def bool(self, v: bool) -> Writer:
        self.out += _BOOL.pack(1 if v else 0)
        return self

    def buffer(self, v: bytes | None) -> Writer:
        if v is None:
            return self.int(-1)
        self.int(len(v))
        self.out += v
        return self

    def string(self, v: str | None) -> Writer:
        return self.buffer(None if v is None else v.encode("utf-8"))

    def strings(self, vs: list[str]) -> Writer:
        self.int(len(vs))
        for v in vs:
            self.string(v)
        return self

    def acls(self, acls: list[ACL]) -> Writer:
        self.int(len(acls))
        for acl in acls:
            self.int(acl.perms).string(acl.scheme).string(acl.id)
        return self

    def stat(self, s: ZStat) -> Writer:
        self.out += _STAT.pack(
            s.czxid, s.mzxid, s.ctime, s.mtime, s.version, s.cversion, s.aversion,
            s.ephemeral_owner, s.data_length, s.num_children, s.pzxid,
        )
        return self

    def bytes(self) -> bytes:
        return bytes(self.out)


def frame(payload: bytes) -> bytes:
    """A packet on the wire: its length, then itself."""
    return _INT.pack(len(payload)) + payload


# ---- records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ACL:
    perms: int
    scheme: str
    id: str


OPEN_ACL_UNSAFE = [ACL(Perms.ALL, "world", "anyone")]


@dataclass(frozen=True)
class ZStat:
    czxid: int = 0
    mzxid: int = 0
    ctime: int = 0
    mtime: int = 0
    version: int = 0
    cversion: int = 0
    aversion: int = 0
    ephemeral_owner: int = 0
    data_length: int = 0
    num_children: int = 0
    pzxid: int = 0

    @classmethod
    def read(cls, r: Reader) -> ZStat:
        return cls(*r._take(_STAT))


@dataclass(frozen=True)
class ConnectRequest:
    protocol_version: int
    last_zxid_seen: int
    timeout: int
    session_id: int
    passwd: bytes
    read_only: bool | None  # None: the client (3.4 or older) did not send the flag

    @classmethod
    def decode(cls, data: bytes) -> ConnectRequest:
        r = Reader(data)
        proto, zxid, timeout, sid = r.int(), r.long(), r.int(), r.long()
        passwd = r.buffer() or b""
        read_only = r.bool() if r.remaining() >= 1 else None
        return cls(proto, zxid, timeout, sid, passwd, read_only)

    def encode(self) -> bytes:
        w = Writer().int(self.protocol_version).long(self.last_zxid_seen).int(self.timeout).long(self.session_id)
        w.buffer(self.passwd)
        if self.read_only is not None:
            w.bool(self.read_only)
        return w.bytes()


@dataclass(frozen=True)
class ConnectResponse:
    protocol_version: int
    timeout: int
    session_id: int
    passwd: bytes
    read_only: bool | None

    def encode(self) -> bytes:
        w = Writer().int(self.protocol_version).int(self.timeout).long(self.session_id).buffer(self.passwd)
        if self.read_only is not None:
            w.bool(self.read_only)
        return w.bytes()

    @classmethod
    def decode(cls, data: bytes) -> ConnectResponse:
        r = Reader(data)
        proto, timeout, sid = r.int(), r.int(), r.long()
        passwd = r.buffer() or b""
        read_only = r.bool() if r.remaining() >= 1 else None
        return cls(proto, timeout, sid, passwd, read_only)


@dataclass(frozen=True)
class RequestHeader:
    xid: int
    type: int


@dataclass(frozen=True)
class ReplyHeader:
    xid: int
    zxid: int
    err: int

    def encode(self) -> bytes:
        return _REPLY.pack(self.xid, self.zxid, self.err)

    @classmethod
    def read(cls, r: Reader) -> ReplyHeader:
        xid, zxid, err = r._take(_REPLY)
        return cls(xid, zxid, err)


# requests ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateRequest:
    path: str
    data: bytes
    acl: list[ACL]
    flags: int
    ttl: int = 0

    @classmethod
    def read(cls, r: Reader, ttl: bool = False) -> CreateRequest:
        path, data, acl, flags = r.string(), r.buffer() or b"", r.acls(), r.int()
        return cls(path, data, acl, flags, r.long() if ttl else 0)


@dataclass(frozen=True)
class DeleteRequest:
    path: str
    version: int

    @classmethod
    def read(cls, r: Reader) -> DeleteRequest:
        return cls(r.string(), r.int())


@dataclass(frozen=True)
class CheckVersionRequest:
    path: str
    version: int

    @classmethod
    def read(cls, r: Reader) -> CheckVersionRequest:
        return cls(r.string(), r.int())


@dataclass(frozen=True)
class PathWatchRequest:
    """exists, getData, getChildren, getChildren2: a path and a watch flag."""

    path: str
    watch: bool

    @classmethod
    def read(cls, r: Reader) -> PathWatchRequest:
        return cls(r.string(), r.bool())


@dataclass(frozen=True)
class PathRequest:
    """sync, getACL, getEphemerals, getAllChildrenNumber: a path alone."""

    path: str

    @classmethod
    def read(cls, r: Reader) -> PathRequest:
        return cls(r.string())


@dataclass(frozen=True)
class SetDataRequest:
    path: str
    data: bytes
    version: int

    @classmethod
    def read(cls, r: Reader) -> SetDataRequest:
        return cls(r.string(), r.buffer() or b"", r.int())


@dataclass(frozen=True)
class SetACLRequest:
    path: str
    acl: list[ACL]
    version: int

    @classmethod
    def read(cls, r: Reader) -> SetACLRequest:
        return cls(r.string(), r.acls(), r.int())


@dataclass(frozen=True)
class SetWatchesRequest:
    relative_zxid: int
    data: list[str]
    exist: list[str]
    child: list[str]
    persistent: list[str] = field(default_factory=list)
    persistent_recursive: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, r: Reader, v2: bool = False) -> SetWatchesRequest:
        zxid, data, exist, child = r.long(), r.strings(), r.strings(), r.strings()
        if not v2:
            return cls(zxid, data, exist, child)
        return cls(zxid, data, exist, child, r.strings(), r.strings())


@dataclass(frozen=True)
class AddWatchRequest:
    path: str
    mode: int

    @classmethod
    def read(cls, r: Reader) -> AddWatchRequest:
        return cls(r.string(), r.int())


@dataclass(frozen=True)
class RemoveWatchesRequest:
    """removeWatches and checkWatches."""

    path: str
    type: int

    @classmethod
    def read(cls, r: Reader) -> RemoveWatchesRequest:
        return cls(r.string(), r.int())


@dataclass(frozen=True)
class AuthRequest:
    type: int
    scheme: str
    auth: bytes

    @classmethod
    def read(cls, r: Reader) -> AuthRequest:
        return cls(r.int(), r.string(), r.buffer() or b"")


@dataclass(frozen=True)
class MultiRequest:
    """multi (writes: create, delete, setData, check) or multiRead (getData, getChildren)."""

    ops: list[tuple[int, Any]]

    @classmethod
    def read(cls, r: Reader) -> MultiRequest:
        ops: list[tuple[int, Any]] = []
        while True:
            op_type, done, _err = r._take(_MULTI_HEADER)
            if done:
                return cls(ops)
            if len(ops) > 100_000:
                raise DecodeError("too many operations in one multi")
            reader = MULTI_OPS.get(op_type)
            if reader is None:
                raise DecodeError(f"opcode {op_type} cannot be part of a multi")
            ops.append((op_type, reader(r)))


@dataclass(frozen=True)
class EmptyRequest:
    """ping, closeSession, whoAmI: no body."""

    @classmethod
    def read(cls, r: Reader) -> EmptyRequest:
        return cls()


MULTI_OPS: dict[int, Callable[[Reader], Any]] = {
    Op.CREATE: CreateRequest.read,
    Op.CREATE2: CreateRequest.read,
    Op.CREATE_CONTAINER: CreateRequest.read,
    Op.CREATE_TTL: lambda r: CreateRequest.read(r, ttl=True),
    Op.DELETE: DeleteRequest.read,
    Op.SET_DATA: SetDataRequest.read,
    Op.CHECK: CheckVersionRequest.read,
    Op.GET_DATA: PathWatchRequest.read,
    Op.GET_CHILDREN: PathWatchRequest.read,
}

#: opcode -> how its request body is read
REQUESTS: dict[int, Callable[[Reader], Any]] = {
    Op.CREATE: CreateRequest.read,
    Op.CREATE2: CreateRequest.read,
    Op.CREATE_CONTAINER: CreateRequest.read,
    Op.CREATE_TTL: lambda r: CreateRequest.read(r, ttl=True),
    Op.DELETE: DeleteRequest.read,
    Op.EXISTS: PathWatchRequest.read,
    Op.GET_DATA: PathWatchRequest.read,
    Op.SET_DATA: SetDataRequest.read,
    Op.GET_ACL: PathRequest.read,
    Op.SET_ACL: SetACLRequest.read,
    Op.GET_CHILDREN: PathWatchRequest.read,
    Op.GET_CHILDREN2: PathWatchRequest.read,
    Op.SYNC: PathRequest.read,
    Op.PING: EmptyRequest.read,
    Op.CHECK: CheckVersionRequest.read,
    Op.MULTI: MultiRequest.read,
    Op.MULTI_READ: MultiRequest.read,
    Op.REMOVE_WATCHES: RemoveWatchesRequest.read,
    Op.CHECK_WATCHES: RemoveWatchesRequest.read,
    Op.AUTH: AuthRequest.read,
    Op.SET_WATCHES: SetWatchesRequest.read,
    Op.SET_WATCHES2: lambda r: SetWatchesRequest.read(r, v2=True),
    Op.GET_EPHEMERALS: PathRequest.read,
    Op.GET_ALL_CHILDREN_NUMBER: PathRequest.read,
    Op.ADD_WATCH: AddWatchRequest.read,
    Op.WHO_AM_I: EmptyRequest.read,
    Op.CLOSE_SESSION: EmptyRequest.read,
}


def decode_request(data: bytes) -> tuple[RequestHeader, Any]:
    """The header and body of a request packet. An opcode this codec does not know has body
    ``None`` (the server answers UNIMPLEMENTED); a body that does not decode raises DecodeError."""
    r = Reader(data)
    xid, op_type = r._take(_HEADER)
    header = RequestHeader(xid, op_type)
    reader = REQUESTS.get(op_type)
    if reader is None:
        return header, None
    return header, reader(r)


# responses ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChildInfo:
    """whoAmI's ClientInfo: an auth scheme and the user it names."""

    scheme: str
    user: str


@dataclass(frozen=True)
class MultiResult:
    """One result of a multi / multiRead: ``op`` is the opcode of the result (``Op.ERROR`` with
    ``err``), ``value`` its body (path, stat, (data, stat), children)."""

    op: int
    err: int = 0
    value: Any = None


def encode_multi(results: list[MultiResult]) -> bytes:
    w = Writer()
    for res in results:
        w.out += _MULTI_HEADER.pack(res.op, 0, res.err)
        if res.op == Op.ERROR:
            w.int(res.err)
        elif res.op in (Op.CREATE, Op.CREATE_CONTAINER):
            w.string(res.value)
        elif res.op in (Op.CREATE2, Op.CREATE_TTL):
            w.string(res.value[0]).stat(res.value[1])
        elif res.op == Op.SET_DATA:
            w.stat(res.value)
        elif res.op == Op.GET_DATA:
            w.buffer(res.value[0]).stat(res.value[1])
        elif res.op == Op.GET_CHILDREN:
            w.strings(res.value)
        # delete and check: no body
    w.out += _MULTI_HEADER.pack(-1, 1, -1)
    return w.bytes()


def reply(xid: int, zxid: int, err: int = 0, body: bytes = b"") -> bytes:
    """A framed reply: header, then ``body`` (only when ``err`` is 0, as ZooKeeper does)."""
    payload = _REPLY.pack(xid, zxid, err) + (body if err == 0 else b"")
    return frame(payload)


def watch_event(event_type: int, path: str, state: int = KeeperState.SYNC_CONNECTED) -> bytes:
    """A framed watch notification (xid -1, zxid -1 as ZooKeeper sends it)."""
    return frame(_REPLY.pack(XID_WATCH_EVENT, -1, 0) + Writer().int(event_type).int(state).string(path).bytes())


def stat_body(stat: ZStat) -> bytes:
    return Writer().stat(stat).bytes()
