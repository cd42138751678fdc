"""The answers of writes (setData, create, delete, multi), of exists, and watch notifications,
parsed with ``struct``.

aiozk parses every answer through its generic parts (a dict of parts per record, a class per
part): measured in a sandbox's agents, that parsing and the notifications' were a fifth of the
agent's CPU. These are the same objects' fields (``stat``, ``path``, ``responses``, a
notification's ``type``/``state``/``path``), read directly from the bytes with the codec's
formats (``wire``). The Stat is the codec's ``ZStat``, read by ``ZStat.unpack_from``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiozk import exc as zk_exc

from .wire.constants import Op
from .wire.jute import HEADER as _TWO_INTS  # a notification starts with two ints: type, state
from .wire.jute import INT, MULTI_HEADER, STAT, ZStat


class FastAnswer:
    """A write's or exists' answer: ``stat`` (None for a delete or check), ``path`` (a create's,
    else None). Always true, as aiozk's answers are (its session re-sends on a false one)."""

    __slots__ = ("path", "stat")

    def __init__(self, path: str | None, stat: ZStat | None) -> None:
        self.path, self.stat = path, stat


class FastMulti:
    """A multi's answer: one ``FastAnswer`` or aiozk exception per operation, in order."""

    __slots__ = ("responses",)

    def __init__(self, responses: list[Any]) -> None:
        self.responses = responses


class FastWatchEvent:
    """A watch notification: ``type``, ``state`` and ``path`` (as the server sent it)."""

    __slots__ = ("path", "state", "type")

    def __init__(self, type_: int, state: int, path: str) -> None:
        self.type, self.state, self.path = type_, state, path


def _string(raw: bytes, at: int) -> tuple[str, int]:
    (n,) = INT.unpack_from(raw, at)
    at += 4
    return raw[at : at + max(n, 0)].decode(), at + max(n, 0)


def _stat(raw: bytes, at: int) -> tuple[ZStat, int]:
    return ZStat.unpack_from(raw, at), at + STAT.size


def _with_stat(raw: bytes, at: int) -> tuple[FastAnswer, int]:
    stat, at = _stat(raw, at)
    return FastAnswer(None, stat), at


def _created(raw: bytes, at: int) -> tuple[FastAnswer, int]:
    path, at = _string(raw, at)
    return FastAnswer(path, None), at


def _created_with_stat(raw: bytes, at: int) -> tuple[FastAnswer, int]:
    path, at = _string(raw, at)
    stat, at = _stat(raw, at)
    return FastAnswer(path, stat), at


def _empty(raw: bytes, at: int) -> tuple[FastAnswer, int]:
    return FastAnswer(None, None), at


#: The parser of each operation's answer body (inside a multi, and alone).
_BODIES: dict[int, Callable[[bytes, int], tuple[FastAnswer, int]]] = {
    Op.SET_DATA: _with_stat,
    Op.EXISTS: _with_stat,
    Op.CREATE: _created,
    Op.CREATE2: _created_with_stat,
    Op.DELETE: _empty,
    Op.CHECK: _empty,
    Op.ADD_WATCH: _empty,
    Op.REMOVE_WATCHES: _empty,
}


def multi_response(raw: bytes, at: int) -> FastMulti:
    """A multi's answer at ``raw[at:]``: what aiozk's ``TransactionResponse`` holds."""
    out: list[Any] = []
    while True:
        opcode, done, _error = MULTI_HEADER.unpack_from(raw, at)
        at += MULTI_HEADER.size
        if done:
            return FastMulti(out)
        if opcode == Op.ERROR:
            (code,) = INT.unpack_from(raw, at)
            at += 4
            out.append(zk_exc.get_response_error(code))
            continue
        body = _BODIES.get(opcode)
        if body is None:
            raise ValueError(f"unexpected op {opcode} in a multi answer")
        answer, at = body(raw, at)
        out.append(answer)


def answer(opcode: int, raw: bytes, at: int) -> Any:
    """The answer of a request with ``opcode`` at ``raw[at:]`` (successful: no error code), or
    None when this module does not parse that kind (aiozk's parts do)."""
    if opcode == Op.MULTI:
        return multi_response(raw, at)
    body = _BODIES.get(opcode)
    return None if body is None else body(raw, at)[0]


def watch_event(raw: bytes, at: int) -> FastWatchEvent:
    """The notification at ``raw[at:]``."""
    type_, state = _TWO_INTS.unpack_from(raw, at)
    path, _ = _string(raw, at + _TWO_INTS.size)
    return FastWatchEvent(type_, state, path)
