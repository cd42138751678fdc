"""Requests of a ZooKeeper-protocol client forwarded to ZooKeeper on the store's own session, in
the codec's wire form, with as little re-encoding as the store's duties allow.

A ZooKeeper-protocol server in front of a ZooKeeper store (the agent's ZooKeeper front) hands a
request's body over as its client sent it; the store puts its chroot in front of the path, gives a
create its own ACL (the store's credentials decide who may touch what, never the client's), sends
it on the current connection with an xid of the session's, and hands the answer back with the
chroot taken off the paths it names. The answer's Stat is ZooKeeper's own, untouched. No task, no
timer, no future per request: the answer is a callback from the connection's read loop, and the
requests of one turn of the event loop go out in one socket write (``connection.ZKConnection``).
A request that finds the session not connected is not sent (``forward`` returns False): the
caller takes the ordinary path, which waits for the connection and retries reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import paths
from .raw import Done, Pending, RawRequest
from .session import ZKSession
from .wire.constants import Op
from .wire.jute import INT, MULTI_HEADER, STAT, Reader, Writer

__all__ = ["CREATES", "MULTI_OPS", "PATH_FIRST", "Done", "Forwarder", "Rechroot", "acl_vector"]

#: The operations a forwarded multi may hold.
MULTI_OPS = frozenset({Op.CREATE, Op.CREATE2, Op.DELETE, Op.SET_DATA, Op.CHECK})
#: The requests whose body is the path, then fields the store leaves as they are.
PATH_FIRST = frozenset({Op.DELETE, Op.EXISTS, Op.GET_DATA, Op.SET_DATA, Op.GET_CHILDREN, Op.GET_CHILDREN2})
CREATES = frozenset({Op.CREATE, Op.CREATE2})
_CREATE_WITH_STAT = frozenset({Op.CREATE2, Op.CREATE_CONTAINER, Op.CREATE_TTL})


class Rechroot:
    """The chroot put in front of the paths a request names and taken off those an answer names."""

    def __init__(self, namespace: paths.Namespace, acl: bytes) -> None:
        self.namespace = namespace
        self.acl = acl
        """The store's ACL, as the wire vector every create carries."""
        self._root = namespace.root.encode()
        #: What a create's answer goes through: its path without the chroot (none without one).
        self.created: Callable[[int, bytes], bytes] | None = (
            None if namespace.root == paths.SEPARATOR else self._strip_created
        )

    def path(self, path: str) -> bytes:
        full = self.namespace.full(path).encode()
        return INT.pack(len(full)) + full

    def relative(self, full: str) -> str:
        return self.namespace.relative(full) or full

    def _strip_created(self, err: int, body: bytes) -> bytes:
        """A create's answer (its path, maybe a Stat) with the chroot taken off the path, in
        bytes (the Stat as it is)."""
        (n,) = INT.unpack_from(body)
        full = body[4 : 4 + n]
        root = self._root
        if full == root:
            name = b"/"
        elif full.startswith(root) and full[len(root) : len(root) + 1] == b"/":
            name = full[len(root) :]
        else:  # outside the chroot: as it is
            return body
        return INT.pack(len(name)) + name + body[4 + n :]

    def create_body(self, path: str, data_field: bytes, flags: int) -> bytes:
        """A create's body under the chroot with the store's ACL; ``data_field``: the data in
        wire form, its length first (``wire.CreateFields``)."""
        return self.path(path) + data_field + self.acl + INT.pack(flags)

    def multi_body(self, ops: list[tuple[int, Any]]) -> bytes:
        """A multi of create, create2, delete, setData and check records (the codec's request
        records), with the chroot and the store's ACL."""
        w = Writer()
        for op, rec in ops:
            w.out += MULTI_HEADER.pack(op, 0, -1)
            w.out += self.path(rec.path)
            if op in CREATES:
                w.buffer(rec.data)
                w.out += self.acl
                w.int(rec.flags)
            elif op == Op.SET_DATA:
                w.buffer(rec.data).int(rec.version)
            else:  # delete, check
                w.int(rec.version)
        w.out += MULTI_HEADER.pack(-1, 1, -1)
        return w.bytes()

    def multi_answer(self, err: int, body: bytes) -> bytes:
        """A multi's answer with the chroot taken off the paths of its creates."""
        if self.namespace.root == paths.SEPARATOR:
            return body
        r = Reader(body)
        out = Writer()
        while True:
            start = r.pos
            op, done, _e = r.take(MULTI_HEADER)
            out.out += body[start : r.pos]
            if done:
                return out.bytes()
            if op in (Op.CREATE, *_CREATE_WITH_STAT):
                out.string(self.relative(r.string()))
                if op in _CREATE_WITH_STAT:
                    s = r.pos
                    r.take(STAT)
                    out.out += body[s : r.pos]
            elif op == Op.SET_DATA:
                s = r.pos
                r.take(STAT)
                out.out += body[s : r.pos]
            elif op == Op.ERROR:
                out.int(r.int())
            # delete and check: no body


def acl_vector(acls: list[tuple[int, str, str]]) -> bytes:
    """ACL entries (perms, scheme, id) as the wire vector a create carries."""
    w = Writer().int(len(acls))
    for perms, scheme, ident in acls:
        w.int(perms).string(scheme).string(ident)
    return w.bytes()


class Forwarder:
    """Sends a ZooKeeper-protocol client's requests on the store's session, under its chroot and
    with its ACL, and hands the answers back with the chroot taken off (the agent's front)."""

    def __init__(self, session: ZKSession, rechroot: Rechroot) -> None:
        self._session = session
        self._rechroot = rechroot

    def forward(self, opcode: int, path: str, rest: bytes, done: Done) -> bool:
        """Send a request whose body is ``path`` then ``rest`` (``PATH_FIRST``) as it is, under
        the chroot; ``done`` gets the answer. False: not connected, nothing sent."""
        if self._session.ended:
            return False
        request = RawRequest(opcode, self._rechroot.path(path) + rest, opcode in (Op.DELETE, Op.SET_DATA))
        return bool(self._session.send_raw(request, Pending(done, None)))

    def forward_create(self, opcode: int, path: str, data_field: bytes, flags: int, done: Done) -> bool:
        """Send a create (``Op.CREATE`` or ``Op.CREATE2``) with the store's ACL, under the chroot;
        ``data_field``: its data in wire form, length first (``wire.CreateFields``). The answer's
        path is relative to the chroot. False: not connected, nothing sent."""
        if self._session.ended:
            return False
        request = RawRequest(opcode, self._rechroot.create_body(path, data_field, flags), True)
        return bool(self._session.send_raw(request, Pending(done, self._rechroot.created)))

    def forward_multi(self, ops: list[tuple[int, Any]], done: Done) -> bool:
        """Send a multi of the codec's request records (``MULTI_OPS``) with the store's ACL, under
        the chroot; the answer's paths are relative. False: not connected, nothing sent."""
        if self._session.ended:
            return False
        request = RawRequest(Op.MULTI, self._rechroot.multi_body(ops), True)
        return bool(self._session.send_raw(request, Pending(done, self._rechroot.multi_answer)))

    def flush(self) -> None:
        """Write now the requests sent so far in this turn of the event loop (they would go at its
        end, together with the later ones): for a caller that knows no more are coming."""
        conn = self._session.conn
        if conn is not None and not conn.closing:
            conn.flush()
