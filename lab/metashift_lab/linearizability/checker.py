"""Is a history of register operations linearizable? (test code, used by the tests and the chaos
benchmark)

The model, a versioned register per key, and its operations are ``register``'s: what an operation
may do to a register's state, and which operations of a window the search takes.

The search is Wing and Gong's, with Lowe's memoization, as Knossos and Porcupine do it: the
history is partitioned by key (linearizability is local), each key's calls and returns are put in
one time-ordered list, and a depth-first search linearizes a pending call at a time, backtracking
at a return whose call it has not placed; every (set of linearized operations, register state)
it reached is cached, so that no such configuration is explored twice. An unknown outcome's
return is at infinity: it may be placed anywhere after its invoke, or left out.

A history that is not linearizable is reported with its smallest non-linearizable window found
by two binary searches: the shortest prefix that is not linearizable (operations still running at
its end count as unknown), then the latest start from which that prefix is still not
linearizable (the register starts in any state; operations running across the start keep their
response but may have taken effect before it). Every window of a linearizable history is
linearizable, and a window of a window is the window itself, so both searches are monotone and
the window is a witness on its own.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from metashift_lab.sandbox.history import OK, READ, REFUSED, Operation

from .register import _NEVER, _NO, ANY, State, _Op, _prepare, _relevant, step

#: Undo records (see ``_search``): a placement made alone (when it fails, its step does), and an
#: optional operation left out at its return (then the unknown outcomes are tried there).
_ALONE: list[Any] = []
_LEFT_OUT: list[Any] = []
#: Search steps allowed per key before the answer is "undecided" (a guard against blow-ups).
DEFAULT_BUDGET = 20_000_000


def _search(ops: list[_Op], initial: State, budget: int, stats: dict[str, int] | None = None) -> bool | None:
    """Whether ``ops`` (one key) linearize from ``initial``; ``None`` when the budget ran out.

    Wing-Gong-Lowe over a doubly linked list of the known operations' calls and returns (lifted
    out when placed, put back when undone). At each step the known candidates (calls before the
    first return still in the list) are tried first; at that return, an optional operation's
    (one running at the window's start) may be left out (it took effect before the window); then
    the unknown outcomes begun by then, which wait in a list of their own ("never" is explored
    before "now"), and of those that would make the same state only the weakest (``_POWER``):
    placing a stronger one instead leaves less to place later, and does nothing more.

    The cache is keyed by (known operations decided, state) and keeps the sets of unknown outcomes
    placed with it: a configuration that placed a superset of the unknown outcomes of one already
    reached, with the same known operations and state, can do nothing that one could not, so it is
    pruned. A read (or a refusal) that fits the state as it is changes nothing: it is placed
    alone, since whatever a linearization does before it could be done after it."""
    known_ops = [o for o in ops if o.known]
    unknown_ops = [o for o in ops if not o.known]  # in invoke order, as ``ops`` is
    mandatory = sum(1 for o in known_ops if not o.optional)
    if mandatory == 0:
        return True
    events = sorted([(o.invoke, 0, i) for i, o in enumerate(known_ops)]
                    + [(o.ret, 1, i) for i, o in enumerate(known_ops)])  # fmt: skip
    n = len(events)
    nxt = [*range(1, n + 2), n + 1]
    prv = [0, *range(0, n + 1)]
    node_op = [0] * (n + 2)
    node_time = [0.0] * (n + 2)
    is_call = [False] * (n + 2)
    call_node = [0] * len(known_ops)
    ret_node = [0] * len(known_ops)
    for node, (t, kind, i) in enumerate(events, start=1):
        node_op[node], node_time[node] = i, t
        if kind == 0:
            is_call[node], call_node[i] = True, node
        else:
            ret_node[i] = node
    placed = [False] * len(unknown_ops)
    cache: dict[tuple[int, State], list[int]] = {}
    # undo records: (the known operation placed or left out, or -1 for an unknown outcome; the
    # state before; how it was chosen: _ALONE, _LEFT_OUT, or the unknown candidates of its step
    # and which of them it was; [] for a known candidate)
    stack: list[tuple[int, State, list[Any], int]] = []
    state, kbits, ubits, steps = initial, 0, 0, 0
    entry = nxt[0]
    candidates: list[tuple[int, State]] | None = None  # the unknown pass of this step, when in it
    at = 0

    def fresh(k2: int, new: State, u2: int) -> bool:
        explored = cache.get((k2, new))
        if explored is None:
            cache[(k2, new)] = [u2]
            return True
        if any(u & ~u2 == 0 for u in explored):
            return False
        explored.append(u2)
        return True

    def unknown_candidates(limit: float) -> list[tuple[int, State]]:
        weakest: dict[Any, tuple[int, int, State]] = {}
        for j, o in enumerate(unknown_ops):
            if o.invoke > limit:
                break
            if placed[j]:
                continue
            new = step(state, o)
            if new is not _NO and ((held := weakest.get(new)) is None or o.power < held[0]):
                weakest[new] = (o.power, j, new)
        return sorted((j, new) for _p, j, new in weakest.values())

    def done(verdict: bool | None) -> bool | None:
        if stats is not None:
            stats.update(steps=steps, configurations=sum(len(v) for v in cache.values()))
        return verdict

    def lift(i: int) -> None:  # the call and its return out of the list
        c, r = call_node[i], ret_node[i]
        nxt[prv[c]], prv[nxt[c]] = nxt[c], prv[c]
        nxt[prv[r]], prv[nxt[r]] = nxt[r], prv[r]

    def unlift(i: int) -> None:  # the return and the call back, in reverse order
        c, r = call_node[i], ret_node[i]
        nxt[prv[r]] = prv[nxt[r]] = r
        nxt[prv[c]] = prv[nxt[c]] = c

    first_look = True  # a configuration not looked at yet: is a no-op candidate there?
    while True:
        steps += 1
        if steps > budget:
            return done(None)
        if candidates is None and first_look:
            first_look = False
            e = nxt[0]
            while is_call[e]:
                o = known_ops[node_op[e]]
                if (o.f == READ or o.refusal) and step(state, o) == state:
                    break
                e = nxt[e]
            if is_call[e]:
                i = node_op[e]
                if fresh(kbits | (1 << i), state, ubits):
                    stack.append((i, state, _ALONE, 0))
                    kbits |= 1 << i
                    lift(i)
                    mandatory -= not known_ops[i].optional
                    if mandatory == 0:
                        return done(True)
                    entry, first_look = nxt[0], True
                else:
                    candidates, at = [], 0  # reached before and failed: so does this step
                continue
        if candidates is None:
            i = node_op[entry]
            if is_call[entry]:
                new = step(state, known_ops[i])
                if new is not _NO and fresh(kbits | (1 << i), new, ubits):
                    stack.append((i, state, [], 0))
                    state, kbits = new, kbits | (1 << i)
                    lift(i)
                    mandatory -= not known_ops[i].optional
                    if mandatory == 0:
                        return done(True)
                    entry, first_look = nxt[0], True
                else:
                    entry = nxt[entry]
                continue
            if known_ops[i].optional:  # at its return, unplaced: it took effect before the window
                stack.append((i, state, _LEFT_OUT, 0))
                kbits |= 1 << i
                lift(i)
                entry, first_look = nxt[0], True
                continue
            # the first return: every known candidate was tried; now the unknown outcomes begun
            # before it
            candidates, at = unknown_candidates(node_time[entry]), 0
        while at < len(candidates) and not fresh(kbits, candidates[at][1], ubits | (1 << candidates[at][0])):
            at += 1
        if at < len(candidates):
            j, new = candidates[at]
            stack.append((-1, state, candidates, at))
            state, ubits = new, ubits | (1 << j)
            placed[j] = True
            entry, candidates, first_look = nxt[0], None, True
            continue
        if not stack:  # nothing left to try at the bottom: not linearizable
            return done(False)
        i, state, candidates, at = stack.pop()
        if i >= 0:
            kbits ^= 1 << i
            unlift(i)
            if candidates is _LEFT_OUT:  # then the unknown outcomes, at its return
                candidates, at = unknown_candidates(node_time[ret_node[i]]), 0
                continue
            mandatory += not known_ops[i].optional
            if candidates is _ALONE:
                candidates, at = [], 0
            else:
                entry, candidates = nxt[call_node[i]], None
        else:
            j = candidates[at][0]
            ubits ^= 1 << j
            placed[j] = False
            at += 1


@dataclass
class KeyResult:
    """The verdict on one key's operations."""

    key: str
    linearizable: bool | None
    """``None``: undecided (the search budget ran out)."""
    operations: int
    window: list[Operation] = field(default_factory=list)
    """The smallest non-linearizable window found (when not linearizable)."""
    window_cut: list[bool] = field(default_factory=list)
    """Per window operation: it crosses the window's edge (at the start: it may have taken effect
    before; at the end: its outcome counts as unknown)."""


@dataclass
class CheckResult:
    """The verdict on a whole history, key by key."""

    keys: list[KeyResult]
    operations: int
    seconds: float

    @property
    def linearizable(self) -> bool:
        return all(k.linearizable for k in self.keys)

    @property
    def failures(self) -> list[KeyResult]:
        return [k for k in self.keys if not k.linearizable]

    def describe(self) -> str:
        if self.linearizable:
            return f"linearizable: {self.operations} operations on {len(self.keys)} keys ({self.seconds:.2f}s)"
        lines = [f"NOT linearizable: {self.operations} operations on {len(self.keys)} keys ({self.seconds:.2f}s)"]
        for k in self.failures:
            if k.linearizable is None:
                lines.append(f"  key {k.key}: undecided ({k.operations} operations: the search budget ran out)")
                continue
            lines.append(f"  key {k.key}: smallest non-linearizable window, {len(k.window)} of {k.operations} "
                         "operations (* crosses an edge: at the start it may have taken effect before, at the end "
                         "its outcome counts as unknown):")  # fmt: skip
            origin = min(op.invoke for op in k.window) if k.window else 0
            for op, cut in zip(k.window, k.window_cut, strict=True):
                lines.append(("   *" if cut else "    ") + op.describe(origin))
        return "\n".join(lines)


def check_key(key: str, ops: list[Operation], initial: State = None, budget: int = DEFAULT_BUDGET) -> KeyResult:
    """Judge one key's operations, from ``initial`` (``None``: absent; ``ANY``)."""
    ops = sorted(_relevant(ops), key=lambda op: op.invoke)
    verdict = _search(_prepare(ops), initial, budget)
    result = KeyResult(key, verdict, len(ops))
    if verdict is False:
        window = smallest_window(ops, initial, budget)
        kept = _prepare(ops, *window)
        result.window = [o.op for o in kept]
        result.window_cut = [o.optional or (not o.known and o.op.status in (OK, REFUSED)) for o in kept]
    return result


def smallest_window(ops: list[Operation], initial: State, budget: int) -> tuple[float, float]:
    """[t0, t1] of the smallest non-linearizable window of ``ops`` (sorted by invoke; known not
    linearizable): the earliest end t1, then the latest start t0 for that end."""

    def fails(t0: float, t1: float) -> bool:
        start = initial if t0 <= ops[0].invoke else ANY
        return _search(_prepare(ops, t0, t1), start, budget) is False

    ends = sorted({op.complete for op in ops if op.status in (OK, REFUSED) and op.complete is not None})
    lo, hi = 0, len(ends) - 1  # the last end fails: the whole history does
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(-_NEVER, ends[mid]):
            hi = mid
        else:
            lo = mid + 1
    t1 = ends[lo]
    starts = sorted({op.invoke for op in ops if op.invoke <= t1})
    lo, hi = 0, len(starts) - 1  # the first start fails (it is the prefix)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fails(starts[mid], t1):
            lo = mid
        else:
            hi = mid - 1
    return starts[lo], t1


def check(ops: Iterable[Operation], initial: dict[str, State] | None = None,
          budget: int = DEFAULT_BUDGET) -> CheckResult:  # fmt: skip
    """Judge a history key by key (``initial``: a key's state before the history, absent when
    not given)."""
    started = time.monotonic()
    by_key: dict[str, list[Operation]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    keys = [check_key(key, by_key[key], (initial or {}).get(key), budget) for key in sorted(by_key)]
    return CheckResult(keys, sum(len(v) for v in by_key.values()), time.monotonic() - started)
