"""Requests already in the codec's wire form, sent as they are on the store's connection, and
their answers handed back as ZooKeeper sent them: what the front's forwarded requests
(``forward``) and the store's own hot requests (``calls``, ``watches``) go as."""

from __future__ import annotations

from collections.abc import Callable

from .wire.jute import HEADER

#: ``done(err, body)`` with ZooKeeper's error code and the answer's body (paths relative to the
#: chroot), or ``done(None, exception)`` when the connection went before the answer came.
Done = Callable[[int | None, bytes | BaseException], None]


class RawRequest:
    """A request already in wire form, duck-typed as an aiozk request for the connection (and
    for the session's ``send``, its retry policy included: ``_metashift_tries``)."""

    __slots__ = ("_metashift_tries", "body", "opcode", "writes_data")
    special_xid = None

    def __init__(self, opcode: int, body: bytes, writes_data: bool) -> None:
        self.opcode = opcode
        self.body = body
        self.writes_data = writes_data
        self._metashift_tries = 0

    def serialize(self, xid: int | None = None) -> bytes:
        return HEADER.pack(xid or 0, self.opcode) + self.body


class RawReply:
    """An answer to a ``RawRequest``: the error code and the body, as ZooKeeper sent them."""

    __slots__ = ("body", "err")

    def __init__(self, err: int, body: bytes) -> None:
        self.err = err
        self.body = body


class Pending:
    """What the connection's read loop resolves for a ``RawRequest`` (duck-typed as an asyncio
    future: ``done``, ``cancelled``, ``set_result``, ``set_exception``): calls ``done`` at once."""

    __slots__ = ("_answered", "_done", "_strip")

    def __init__(self, done: Done, strip: Callable[[int, bytes], bytes] | None) -> None:
        self._done = done
        self._strip = strip
        self._answered = False

    def done(self) -> bool:
        return self._answered

    def cancelled(self) -> bool:
        return False

    def set_result(self, result: tuple[int, RawReply]) -> None:
        self._answered = True
        reply = result[1]
        body = reply.body
        if reply.err == 0 and self._strip is not None:
            body = self._strip(reply.err, body)
        self._done(reply.err, body)

    def set_exception(self, error: BaseException) -> None:
        self._answered = True
        self._done(None, error)
