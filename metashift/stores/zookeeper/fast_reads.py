"""The answers of reads (getData, getChildren, getChildren2), parsed with ``struct``, and
ZooKeeper's ``multiRead``.

aiozk parses every answer through its generic parts, and sends every request as a request of its
own: both are the hot spots of reading a whole tree. Here the getData and getChildren answers
are parsed directly, and ``multiRead`` (opcode 22, ZooKeeper 3.6+) carries many getData and
getChildren in one request. ZooKeeper handles a request in a pipeline of threads (prepare, sync,
final), and that journey, not the lookup of the node, is what a read costs it: measured here, a
pipelined getData costs ZooKeeper 64-76 us of CPU, a getData inside a multiRead of 128 costs
3-17 us. Each read of a multiRead is answered on its own (a missing node is an error for that
read only), in order.
"""

from __future__ import annotations

from .wire.constants import Op
from .wire.jute import HEADER as _REQUEST_HEADER
from .wire.jute import INT as SIZE
from .wire.jute import MULTI_HEADER as _MULTI_HEADER
from .wire.jute import STAT, ZStat

_MULTI_END = _MULTI_HEADER.pack(-1, True, -1)


class FastGetData:
    """A getData answer: ``data`` (None for a null value, as aiozk) and ``stat``."""

    __slots__ = ("data", "stat")

    def __init__(self, data: bytes | None, stat: ZStat) -> None:
        self.data, self.stat = data, stat


class FastGetChildren:
    """A getChildren or getChildren2 answer: the children's names, as the server sent them, and
    (getChildren2 only, else None) the parent's ``stat``."""

    __slots__ = ("children", "stat")

    def __init__(self, children: list[str], stat: ZStat | None = None) -> None:
        self.children = children
        self.stat = stat


def get_data_response(raw: bytes, at: int) -> tuple[FastGetData, int]:
    """The getData answer at ``raw[at:]``, and the offset after it."""
    (n,) = SIZE.unpack_from(raw, at)
    at += 4
    data = None if n < 0 else raw[at : at + n]
    at += max(n, 0)
    return FastGetData(data, ZStat.unpack_from(raw, at)), at + STAT.size


def get_children_response(raw: bytes, at: int) -> tuple[FastGetChildren, int]:
    """The getChildren answer at ``raw[at:]``, and the offset after it."""
    (count,) = SIZE.unpack_from(raw, at)
    at += 4
    children = []
    for _ in range(max(count, 0)):
        (n,) = SIZE.unpack_from(raw, at)
        at += 4
        children.append(raw[at : at + n].decode())
        at += n
    return FastGetChildren(children), at


def get_children2_response(raw: bytes, at: int) -> FastGetChildren:
    """The getChildren2 answer at ``raw[at:]``: the children, then the parent's Stat."""
    answer, at = get_children_response(raw, at)
    answer.stat = ZStat.unpack_from(raw, at)
    return answer


class MultiReadRequest:
    """``multiRead``: getData and getChildren of many paths (full paths, chroot included), no
    watches. Duck-typed as an aiozk request for the connection's ``send``."""

    opcode = Op.MULTI_READ
    special_xid = None
    writes_data = False

    def __init__(self, reads: list[tuple[int, str]]) -> None:
        self.reads = reads
        """(``Op.GET_DATA`` or ``Op.GET_CHILDREN``, full path) per read."""

    def serialize(self, xid: int | None = None) -> bytes:
        out = [_REQUEST_HEADER.pack(xid or 0, self.opcode)]
        for opcode, path in self.reads:
            name = path.encode()
            out.append(_MULTI_HEADER.pack(opcode, False, -1))
            out.append(SIZE.pack(len(name)))
            out.append(name)
            out.append(b"\0")  # watch: false
        out.append(_MULTI_END)
        return b"".join(out)


def multi_read_response(raw: bytes, at: int) -> list[FastGetData | FastGetChildren | int]:
    """The answers of a multiRead, in order: each a getData or getChildren answer, or the
    ZooKeeper error code of that read."""
    out: list[FastGetData | FastGetChildren | int] = []
    while True:
        opcode, done, error = _MULTI_HEADER.unpack_from(raw, at)
        at += _MULTI_HEADER.size
        if done:
            return out
        if opcode == Op.GET_DATA:
            data, at = get_data_response(raw, at)
            out.append(data)
        elif opcode == Op.GET_CHILDREN:
            children, at = get_children_response(raw, at)
            out.append(children)
        elif opcode == Op.ERROR:
            (code,) = SIZE.unpack_from(raw, at)
            at += 4
            out.append(code or error)
        else:
            raise ValueError(f"unexpected op {opcode} in a multiRead answer")
