"""Histories made by simulating concurrent clients on true registers (test code): every operation
takes effect at one moment between its invoke and its response, so the history is linearizable by
construction, unless a fault is asked for (a lost write, a stale read, a compare-and-set that
succeeds on a stale version). For the checker's own tests and its speed benchmark."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from metashift_lab.sandbox.history import CAS, CREATE, DELETE, READ, UPDATE, WRITE, Operation

#: The mix of operations a simulated client draws from.
MIX = ((READ, 40), (WRITE, 12), (UPDATE, 8), (CAS, 25), (CREATE, 8), (DELETE, 7))
LOST_WRITE, STALE_READ, STALE_CAS = "lost-write", "stale-read", "stale-cas"


@dataclass
class _Register:
    state: tuple[bytes, int] | None = None
    #: (state, the time the write that ended it answered) for the states it had, oldest first
    past: list[tuple[tuple[bytes, int] | None, int]] = field(default_factory=list)


def _apply(reg: _Register, op: Operation, ends_at: int) -> tuple[str, tuple[bytes, int] | None, int | None]:
    """Apply ``op`` to ``reg``: (status, read result, version made); status ok or a refusal name."""
    s = reg.state
    new: tuple[bytes, int] | None
    if op.f == READ:
        return "ok", s, None
    if op.f == DELETE:
        if s is None:
            return "not_found", None, None
        if op.expected is not None and s[1] != op.expected:
            return "bad_version", None, None
        new = None
    elif op.f == CREATE:
        if s is not None:
            return "exists", None, None
        new = (op.value or b"", 0)
    elif op.f == CAS:
        if s is None or s[1] != op.expected:
            return "bad_version", None, None
        new = (op.value or b"", s[1] + 1)
    elif op.f == UPDATE and s is None:
        return "not_found", None, None
    else:  # WRITE, UPDATE
        new = (op.value or b"", 0 if s is None else s[1] + 1)
    reg.past.append((s, ends_at))
    reg.state = new
    return "ok", None, None if new is None else new[1]


def simulate(seed: int, ops: int, keys: int = 1, clients: int = 4, unknown: float = 0.02,
             fault: str | None = None, fault_after: float = 0.5) -> list[Operation]:  # fmt: skip
    """``ops`` operations of ``clients`` concurrent clients on ``keys`` registers (absent at
    first); about ``unknown`` of the writes end with an unknown outcome (half of them applied,
    perhaps long after). ``fault``: once ``fault_after`` of the operations are done, one operation
    misbehaves as it says (and the history is no longer linearizable); its ``error`` says so."""
    rng = random.Random(seed)
    regs = [_Register() for _ in range(keys)]
    seen: dict[tuple[int, int], int] = {}  # (client, key) -> the last version that client saw
    history: list[Operation] = []
    events: list[tuple[int, int, int, int]] = []  # (time, order, kind 0 effect / 1 answer, op index)
    effects: dict[int, tuple[int, int]] = {}  # op -> (key index, answer time) while pending
    results: dict[int, tuple[str, tuple[bytes, int] | None, int | None]] = {}
    faulted = False
    order = 0
    kinds, weights = zip(*MIX, strict=True)

    def launch(client: int, at: int) -> None:
        nonlocal order
        n = len(history)
        if n >= ops:
            return
        k = rng.randrange(keys)
        f = rng.choices(kinds, weights)[0]
        value = f"c{client}-{n}".encode() if f not in (READ, DELETE) else None
        expected = seen.get((client, k), 0) if f == CAS else None
        if f == DELETE and rng.random() < 0.5:
            expected = seen.get((client, k), 0)
        op = Operation(f"c{client}", f"k{k}", f, value, expected, invoke=at)
        history.append(op)
        duration = rng.randint(1_000, 50_000)
        if f != READ and rng.random() < unknown:
            op.status, op.error = "unknown", "simulated timeout"
            if rng.random() < 0.5:
                effect = at + rng.randint(1, 4 * duration)
                heapq.heappush(events, (effect, order, 0, n))
                effects[n] = (k, effect)
                order += 1
            launch(client, at + duration + rng.randint(0, 3_000))
            return
        heapq.heappush(events, (at + rng.randint(0, duration), order, 0, n))
        heapq.heappush(events, (at + duration, order + 1, 1, n))
        effects[n] = (k, at + duration)
        order += 2

    for c in range(clients):
        launch(c, rng.randint(0, 5_000))
    while events:
        t, _order, kind, n = heapq.heappop(events)
        op = history[n]
        k = int(op.key[1:])
        client = int(op.process[1:])
        if kind == 0:
            reg = regs[k]
            mine = not faulted and fault is not None and len(history) >= ops * fault_after and op.status != "unknown"
            if mine and fault == LOST_WRITE and op.f in (WRITE, UPDATE, CAS) and reg.state is not None:
                if op.f != CAS or reg.state[1] == op.expected:
                    # answered ok with the version it would have made, but never applied
                    results[n] = ("ok", None, reg.state[1] + 1)
                    faulted, op.error = True, f"simulated fault: {fault}"
                    continue
            if mine and fault == STALE_READ and op.f == READ:
                # a state replaced by a write that answered before this read began (values are
                # unique, so it can never come back; absent could, by a concurrent delete)
                older = [s for s, ended in reg.past if ended < op.invoke]
                if older and older[-1] is not None and older[-1] != reg.state:
                    results[n] = ("ok", older[-1], None)
                    faulted, op.error = True, f"simulated fault: {fault}"
                    continue
            if mine and fault == STALE_CAS and op.f == CAS and reg.state is not None and reg.past:
                answered = [s for s, ended in reg.past if ended < op.invoke]
                if answered and answered[-1] is not None and reg.state[1] > answered[-1][1] + 1:
                    # applied on a version superseded by a write that answered before its invoke
                    op.expected = answered[-1][1]
                    reg.past.append((reg.state, effects[n][1]))
                    reg.state = (op.value or b"", op.expected + 1)
                    results[n] = ("ok", None, reg.state[1])
                    faulted, op.error = True, f"simulated fault: {fault}"
                    continue
            results[n] = _apply(reg, op, effects[n][1])
            continue
        status, got, version = results.pop(n)
        op.complete = t
        if status == "ok":
            op.status = "ok"
            if op.f == READ:
                op.found, op.version = got is not None, got[1] if got is not None else None
                op.read = got[0] if got is not None else None
                if got is not None:
                    seen[(client, k)] = got[1]
            else:
                op.version = version
                if version is not None:
                    seen[(client, k)] = version
        else:
            op.status, op.error = "refused", status
        launch(client, t + rng.randint(0, 3_000))
    if fault is not None and not faulted:
        raise ValueError(f"no operation could take the fault {fault} (seed {seed}): try another seed")
    for op in history:
        if op.status == "pending":  # an unknown outcome whose effect was never applied
            op.status = "unknown"
    return history
