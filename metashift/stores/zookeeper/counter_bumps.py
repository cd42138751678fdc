"""Raising a ZooKeeper sequence counter by many steps, at the server's pace.

ZooKeeper names a sequential child after its parent's count of child creations, and only a
creation moves it: raising the counter by ``n`` takes ``n`` creations (each followed by the
delete of the same throw-away child, so that nothing stays). They go in ``multi`` requests of
64 (create, delete) pairs, all alike: the request is serialized once and sent again and again
with a new xid (``BumpMulti``), and its answer is only scanned for a failed operation
(``bump_error``), not parsed into objects. That leaves the client a few microseconds per step;
aiozk's own serialization and parsing cost it ~15 us per step, more than the server spends.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiozk import protocol

from .wire.constants import Op
from .wire.jute import HEADER as _REQUEST_HEADER
from .wire.jute import INT as SIZE
from .wire.jute import MULTI_HEADER as _MULTI_HEADER

#: The opcode that marks a ``BumpMulti`` in the connection's table of requests in flight, so that
#: its answer takes ``bump_error``'s path; the wire carries ZooKeeper's own ``multi`` (14).
OPCODE_BUMPS = -Op.MULTI
#: (create, delete) pairs per multi (512 operations, ~25 KB): measured, 64 pairs reach 54k steps/s, 256 pairs
#: 73k (the server's work per request is shared by more steps), 1024 no more.
PAIRS_PER_MULTI = 256
#: Multis in flight on the session: enough to keep the server busy (it is the limit), few enough
#: that the last one sent does not wait long behind the others on a loaded server.
MULTIS_IN_FLIGHT = 8
#: Longest wait for the answer to one multi (a loaded server works through those before it first).
MULTI_SECONDS = 60.0


class BumpMulti:
    """A ``multi`` of ``pairs`` (create, delete) pairs of one throw-away child, serialized once.
    Duck-typed as an aiozk request for the connection's ``send``; never re-sent after a lost
    connection (``writes_data``)."""

    opcode = OPCODE_BUMPS
    special_xid = None
    writes_data = True

    def __init__(self, probe: str, acl: list[Any], pairs: int) -> None:
        multi = protocol.TransactionRequest()
        for _ in range(pairs):
            create = protocol.CreateRequest(path=probe, data=b"", acl=acl)
            create.set_flags(ephemeral=False, sequential=False, container=False)
            multi.add(create)
            multi.add(protocol.DeleteRequest(path=probe, version=-1))
        self.pairs = pairs
        self._body = multi.serialize(0)[_REQUEST_HEADER.size :]

    def serialize(self, xid: int | None = None) -> bytes:
        return _REQUEST_HEADER.pack(xid or 0, Op.MULTI) + self._body


def bump_error(raw: bytes, at: int) -> int:
    """The ZooKeeper error code of the first failed operation of a ``BumpMulti``'s answer at
    ``raw[at:]``, 0 when every one succeeded."""
    while True:
        opcode, done, error = _MULTI_HEADER.unpack_from(raw, at)
        at += _MULTI_HEADER.size
        if done:
            return 0
        if opcode == Op.CREATE:  # the created path
            (n,) = SIZE.unpack_from(raw, at)
            at += 4 + max(n, 0)
        elif opcode == Op.ERROR:
            (code,) = SIZE.unpack_from(raw, at)
            return code or error or -1
        elif opcode != Op.DELETE:
            return -1  # not an answer to our multi


async def send_bumps(
    send: Any, probe: str, acl: list[Any], steps: int, in_flight: int = MULTIS_IN_FLIGHT
) -> None:
    """``steps`` creations (and deletes) of ``probe`` in ``BumpMulti`` requests, ``in_flight`` of
    them at a time; ``send(request)`` sends one and returns its answer (``bump_error``'s code).
    Raises ``RuntimeError`` with the first error code a multi answered."""
    full, rest = divmod(steps, PAIRS_PER_MULTI)
    whole = BumpMulti(probe, acl, PAIRS_PER_MULTI) if full else None
    queue = [BumpMulti(probe, acl, rest)] if rest else []
    left = full
    failure: list[int] = []

    async def worker() -> None:
        nonlocal left
        while not failure:
            if queue:
                request = queue.pop()
            elif left > 0 and whole is not None:
                left -= 1
                request = whole
            else:
                return
            code = await send(request)
            if code:
                failure.append(code)

    await asyncio.gather(*(worker() for _ in range(max(1, min(in_flight, full + len(queue))))))
    if failure:
        raise RuntimeError(f"ZooKeeper refused a create or delete of {probe} (error {failure[0]})")
