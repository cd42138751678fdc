"""The register a history is judged against, and its operations as the linearizability search
(``checker``) takes them.

The model is a versioned register per key, as Pulsar's metadata store has it: absent, or a value
and a version (0 at creation, +1 per write). Operations: read, blind write (creates when absent),
update (must exist), create, compare-and-set on the version, delete (optionally on a version);
refusals (``bad_version``, ``not_found``, ``exists``) are observations too. An operation whose
outcome is unknown may take effect at any moment after its invoke, or never; one that wrote
nothing (``not-applied``) and reads that failed tell nothing and are left out (``_relevant``).
``_prepare`` cuts a window of a key's operations for the search; ``step`` is the register's
transition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from metashift_lab.sandbox.history import (
    CAS,
    CREATE,
    DELETE,
    NOT_APPLIED,
    OK,
    PENDING,
    READ,
    REFUSED,
    UNKNOWN,
    UPDATE,
    WRITE,
    Operation,
)

#: The register in any state (a window's start): the first operations that look at it pin it.
ANY: Any = ("any",)
#: A version not known (a write with unknown outcome on a register in any state).
SOME_VERSION = -1
#: The register states: None (absent), (value, version), or ANY.
State = Any
_NO = object()
_NEVER = float("inf")


#: The value of every write no read returned: which of them the register holds cannot matter.
UNSEEN: Any = ("unseen",)
#: Of two unknown outcomes that would make the same state from the same state, the one of higher
#: power can also be placed in every state where the other can, with the same effect: a blind
#: write wherever an update, a compare-and-set or a create can; an update wherever a
#: compare-and-set can; a delete without a version wherever one with a version can.
_POWER = {CAS: 0, CREATE: 0, UPDATE: 1, WRITE: 2, DELETE: 0, READ: 0}


class _Op:
    """One operation, prepared for the search."""

    __slots__ = ("expected", "f", "index", "invoke", "known", "ok", "op", "optional", "power", "refusal", "result",
                 "ret", "value", "version")  # fmt: skip

    def __init__(self, op: Operation, index: int, unknown: bool, optional: bool = False) -> None:
        self.op = op
        self.index = index
        self.optional = optional
        """Its response is known, but it may also have taken effect before the window began."""
        self.f = op.f
        self.power = _POWER[op.f]
        self.value: Any = op.value
        self.expected = op.expected
        self.invoke = op.invoke
        self.known = not unknown and op.status in (OK, REFUSED)
        self.ok = self.known and op.status == OK
        self.refusal = op.error if self.known and op.status == REFUSED else ""
        self.version = op.version if self.known else None
        self.result: State = ((op.read or b"", op.version) if op.found else None) if self.f == READ else None
        self.ret: float = op.complete if self.known and op.complete is not None else _NEVER


def step(s: State, o: _Op) -> State:
    """The register's state after ``o`` applied in state ``s``, or ``_NO`` when ``o`` cannot
    have happened (or answered what it did) in ``s``."""
    if o.refusal:  # refused: nothing written; the refusal must fit the state
        r = o.refusal
        if s is ANY:
            return s
        if r == "not_found":
            return s if s is None else _NO
        if r == "exists":
            return s if s is not None else _NO
        if r == "bad_version":  # absent too: a metashift put with a version on a missing node
            return s if s is None or s[1] == SOME_VERSION or s[1] != o.expected else _NO
        return _NO
    f = o.f
    if f == READ:
        if s is ANY:
            return o.result
        if o.result is None or s is None:
            return s if o.result is None and s is None else _NO
        if s[0] != o.result[0] or (s[1] != SOME_VERSION and s[1] != o.result[1]):
            return _NO
        return o.result
    if f == DELETE:
        if s is None:
            return _NO
        if o.expected is not None and s is not ANY and s[1] != SOME_VERSION and s[1] != o.expected:
            return _NO
        return None
    if f == WRITE or f == UPDATE:
        if s is None:
            if f == UPDATE:
                return _NO
            version = 0
        elif s is ANY or s[1] == SOME_VERSION:
            version = SOME_VERSION
        else:
            version = s[1] + 1
    elif f == CREATE:
        if s is not None and s is not ANY:
            return _NO
        version = 0
    elif f == CAS:
        if o.expected is None or s is None or (s is not ANY and s[1] != SOME_VERSION and s[1] != o.expected):
            return _NO
        version = o.expected + 1
    else:
        raise ValueError(f"unknown operation {f!r}")
    if o.version is not None:  # the version the write answered must be the one it made
        if version == SOME_VERSION:
            version = o.version
        elif version != o.version:
            return _NO
    return (o.value, version)


def _relevant(ops: Iterable[Operation]) -> list[Operation]:
    """The operations that say something: not the ones that wrote nothing, nor unanswered reads."""
    out = []
    for op in ops:
        if op.status == NOT_APPLIED:
            continue
        if op.f == READ and op.status not in (OK,):
            continue
        out.append(op)
    return out


def _prepare(ops: list[Operation], t0: float = -_NEVER, t1: float = _NEVER) -> list[_Op]:
    """The operations of the window [t0, t1] (those running at some moment of it), in invoke
    order. One running at t1 has an unknown outcome (if a read, it is left out): the window ends
    before its response. One running at t0 keeps its response but is optional: it may have taken
    effect before t0, where the register's state is anything.

    A value no read returned becomes ``UNSEEN``: the model compares values only with what reads
    returned, so which of those values the register holds cannot change a verdict, and the search
    then sees that two such writes do the same."""
    out: list[_Op] = []
    for op in ops:
        end = op.complete if op.status in (OK, REFUSED) and op.complete is not None else _NEVER
        if op.invoke > t1 or end < t0:
            continue
        if end > t1 and op.f == READ:
            continue
        out.append(_Op(op, len(out), unknown=end > t1 or op.status in (UNKNOWN, PENDING), optional=op.invoke < t0))
    seen = {o.result[0] for o in out if o.f == READ and o.known and o.result is not None}
    for o in out:
        if o.value is not None and o.value not in seen:
            o.value = UNSEEN
        if o.f == DELETE and o.expected is None:
            o.power = 1
    return out
