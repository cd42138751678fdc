"""What the server sends: framed replies, multi results, watch notifications."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metashift.stores.zookeeper.wire.constants import XID_WATCH_EVENT, KeeperState, Op
from metashift.stores.zookeeper.wire.jute import MULTI_HEADER, REPLY, Writer, ZStat, frame


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
        w.out += MULTI_HEADER.pack(res.op, 0, res.err)
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
    w.out += MULTI_HEADER.pack(-1, 1, -1)
    return w.bytes()


def reply(xid: int, zxid: int, err: int = 0, body: bytes = b"") -> bytes:
    """A framed reply: header, then ``body`` (only when ``err`` is 0, as ZooKeeper does)."""
    payload = REPLY.pack(xid, zxid, err) + (body if err == 0 else b"")
    return frame(payload)


def watch_event(event_type: int, path: str, state: int = KeeperState.SYNC_CONNECTED) -> bytes:
    """A framed watch notification (xid -1, zxid -1 as ZooKeeper sends it)."""
    return frame(REPLY.pack(XID_WATCH_EVENT, -1, 0) + Writer().int(event_type).int(state).string(path).bytes())


def stat_body(stat: ZStat) -> bytes:
    return Writer().stat(stat).bytes()
