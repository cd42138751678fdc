"""Histories of operations on registers (a set of keys with reads, writes and compare-and-set),
recorded by the sandbox's clients so that a linearizability checker can judge them: each
operation's invoke and response stamped with one monotonic clock, the value and version it
returned, or that its outcome is unknown. Saved and loaded as JSON lines."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metashift.stores import AlreadyExists, BadVersion, MetadataStoreError, NotFound, Stat

# What an operation does (``Operation.f``).
READ = "read"
"""Read the register: its value and version, or that it is absent."""
WRITE = "write"
"""A blind write that creates the register when absent (``put`` without an expected version)."""
UPDATE = "update"
"""A blind write of a register that must exist (ZooKeeper's ``setData`` with version -1)."""
CREATE = "create"
"""Create the register; refused (``exists``) when it is there."""
CAS = "cas"
"""Compare-and-set: write when the version is ``expected``; refused (``bad_version``) otherwise."""
DELETE = "delete"
"""Delete (when ``expected`` is set, only at that version)."""
KINDS = (READ, WRITE, UPDATE, CREATE, CAS, DELETE)

# What came of it (``Operation.status``).
PENDING = "pending"
"""Invoked, no answer yet; an operation still pending when the history ends is unknown."""
OK = "ok"
"""Done: ``version`` (and for a read ``found``/``read``) say what it returned."""
REFUSED = "refused"
"""The store refused it (``error`` is ``bad_version``, ``not_found`` or ``exists``): nothing was
written, and the refusal says something about the register's state."""
NOT_APPLIED = "not-applied"
"""It failed and wrote nothing, and never will (a write held past its deadline, a failed read):
it tells nothing about the register."""
UNKNOWN = "unknown"
"""It may have taken effect at any moment after its invoke, or never (a lost connection, a
deadline passed with the write in the store's hands, a killed agent)."""

#: The refusals, as ``Operation.error`` names them.
REFUSALS = {AlreadyExists: "exists", BadVersion: "bad_version", NotFound: "not_found"}


def now() -> int:
    """The history's clock: monotonic nanoseconds, the same for every thread of the process."""
    return time.monotonic_ns()


@dataclass(slots=True)
class Operation:
    """One operation of one process on one key, from its invoke to its response (if any)."""

    process: str
    key: str
    f: str
    value: bytes | None = None
    """What a write writes."""
    expected: int | None = None
    """The version a compare-and-set (or a conditional delete) expects."""
    invoke: int = 0
    complete: int | None = None
    """When the response came (``now()``); ``None`` while pending and when the outcome is unknown."""
    status: str = PENDING
    found: bool | None = None
    """A read's answer: whether the register exists."""
    read: bytes | None = None
    """A read's answer: the value."""
    version: int | None = None
    """The version a read saw, or the version a write made (``None`` when the client is not told)."""
    error: str = ""
    """A refusal's name (``REFUSALS``), or the text of the error that left the outcome open."""

    def ok(self, version: int | None = None) -> None:
        self.status, self.complete, self.version = OK, now(), version

    def ok_read(self, value: bytes | None, version: int | None = None) -> None:
        """A read's answer: the value and version, or ``None`` when the register is absent."""
        self.status, self.complete = OK, now()
        self.found = value is not None
        self.read, self.version = value, version if value is not None else None

    def ok_get(self, got: tuple[bytes, Stat] | None) -> None:
        """A read's answer as a store's ``get`` gives it."""
        self.ok_read(*((got[0], got[1].version) if got is not None else (None, None)))

    def refused(self, name: str) -> None:
        self.status, self.complete, self.error = REFUSED, now(), name

    def not_applied(self, error: str) -> None:
        self.status, self.complete, self.error = NOT_APPLIED, now(), error

    def unknown(self, error: str) -> None:
        self.status, self.complete, self.error = UNKNOWN, None, error

    def failed(self, err: BaseException) -> None:
        """Record ``err`` (a store or client error, or anything that cut the call off): a refusal,
        nothing written, or an unknown outcome, as the error says."""
        text = f"{type(err).__name__}: {err}"[:300]
        for cls, name in REFUSALS.items():
            if isinstance(err, cls):
                self.refused(name)
                return
        if self.f == READ or (isinstance(err, MetadataStoreError) and not err.write_may_have_happened):
            self.not_applied(text)
        else:
            self.unknown(text)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        for name in ("value", "read"):
            if body[name] is not None:
                body[name] = body[name].decode("latin-1")  # bytes <-> str one to one
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Operation:
        body = dict(body)
        for name in ("value", "read"):
            if body.get(name) is not None:
                body[name] = body[name].encode("latin-1")
        return cls(**body)

    def describe(self, origin: int = 0) -> str:
        """One line: when (ms from ``origin``), who, what, and what came of it."""
        start = (self.invoke - origin) / 1e6
        end = "?" if self.complete is None else f"{(self.complete - origin) / 1e6:.1f}"
        what = self.f
        if self.f != READ and self.value is not None:
            what += f" {self.value!r}"
        if self.expected is not None:
            what += f" if version {self.expected}"
        if self.status == OK and self.f == READ:
            got = f"-> {self.read!r} version {self.version}" if self.found else "-> absent"
        elif self.status == OK:
            got = "-> ok" + (f" version {self.version}" if self.version is not None else "")
        elif self.status == REFUSED:
            got = f"-> refused: {self.error}"
        else:
            got = f"-> {self.status}" + (f" ({self.error})" if self.error else "")
        return f"[{start:10.1f} .. {end:>10} ms] {self.process:<14} {self.key:<26} {what} {got}"


class History:
    """The operations of every client of a run, in invoke order per process (appends from
    several threads are safe)."""

    def __init__(self, ops: Iterable[Operation] = ()) -> None:
        self.ops: list[Operation] = list(ops)
        self._lock = threading.Lock()

    def invoke(self, process: str, key: str, f: str, value: bytes | None = None,
               expected: int | None = None) -> Operation:  # fmt: skip
        """A new operation, invoked now (stamp it last: nothing the client does for it comes
        before its invoke)."""
        op = Operation(process, key, f, value, expected)
        with self._lock:
            self.ops.append(op)
        op.invoke = now()
        return op

    def finish(self) -> None:
        """The run is over: every operation still pending has an unknown outcome."""
        for op in self.ops:
            if op.status == PENDING:
                op.unknown(op.error or "no answer before the history ended")

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Operation]:
        return iter(list(self.ops))

    def count(self, status: str) -> int:
        return sum(1 for op in self.ops if op.status == status)

    def save(self, path: Path) -> None:
        with open(path, "w") as f:
            for op in self.ops:
                f.write(json.dumps(op.to_json()) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        with open(path) as f:
            return cls(Operation.from_json(json.loads(line)) for line in f if line.strip())
