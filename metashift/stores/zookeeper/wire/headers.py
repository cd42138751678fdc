"""The connection handshake (ConnectRequest, ConnectResponse) and the headers of requests and
replies."""

from __future__ import annotations

from dataclasses import dataclass

from metashift.stores.zookeeper.wire.jute import REPLY, Reader, Writer


@dataclass(frozen=True)
class ConnectRequest:
    """The client's first packet: protocol version, session timeout, id, password, read-only."""

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
    """The answer to a connect: negotiated timeout, session id and password."""

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
    """Every request's header: its xid and opcode."""

    xid: int
    type: int


@dataclass(frozen=True)
class ReplyHeader:
    """Every reply's header: the request's xid, the zxid, the error code."""

    xid: int
    zxid: int
    err: int

    def encode(self) -> bytes:
        return REPLY.pack(self.xid, self.zxid, self.err)

    @classmethod
    def read(cls, r: Reader) -> ReplyHeader:
        xid, zxid, err = r.take(REPLY)
        return cls(xid, zxid, err)
