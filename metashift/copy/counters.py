"""How each sequence counter is carried to the target, and checked there.

Which treatment a counter gets is stated by the rules, never guessed (``Rules.counters``,
``Rules.ledgers_roots``):

- a node of BookKeeper's ledger-id generator under a ledgers root ``R`` (``R/idgen``,
  ``R/idgen-long``, ``R/idgen-long/HOB-*``): the generator as a whole is carried by a **jump**
  (``ledger_ids.py``: a new ``HOB-`` node above every id the source handed out, two writes at
  most), and each counter it retires gets a **floor** (one write: what the agent hands out
  from under it). The writes do not grow with the number of ids. Into a store that moves a
  counter in one write (Oxia: ``Store.sequence_counter_in_one_write``) each of its counters is
  carried exactly instead, in one write each: the ids go on where the source left them, with no
  jump and no floor. Where ``R/LAYOUT`` names a 31-bit-only ledger manager, its counters are
  carried exactly too, step by step;
- any other counter (a plain sequential parent, ``/counters/*`` by default): **exact**, its own
  counter raised to the source's next suffix, one write per step (``advance_sequence_counter``:
  as fast as the store allows).

Each carry says what it did as ``CounterCarry`` entries keyed by path: a jumped generator's entry
is keyed by ``R/idgen-long``, with its next ledger id on both sides; an exactly carried counter
(each node of a generator carried exactly) by its own path. A carry is asked for each counter node
the copy puts in place (a jump carries the whole generator at the first, and finds nothing more to
do at the others). Every carry is idempotent: run again (a second pass, a second partition meeting
the same generator) it writes nothing more.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from metashift.stores import MetadataStoreError, Store
from metashift.stores.sequence_floors import raise_floor, read_floor

from . import ledger_ids
from .ledger_ids import issued_below
from .rules import Rules

#: ``CounterCarry.scheme``
SEQUENTIAL = "sequential"
LEDGER_IDS = "ledger-ids"
#: ``CounterCarry.carried``, weakest first (``merge`` keeps the strongest)
NONE, FLOOR, EXACT, JUMP = "none", "floor", "exact", "jump"
_RANK = {NONE: 0, FLOOR: 1, EXACT: 2, JUMP: 3}


@dataclass
class CounterCarry:
    """What one carry did to one counter."""

    scheme: str
    """``sequential`` (a plain parent) or ``ledger-ids`` (a node of a ledger-id generator)."""
    carried: str
    """``exact`` (the target's own counter raised step by step), ``jump`` (a new ``HOB-`` node),
    ``floor`` (a retired counter's floor raised), ``none`` (already far enough: nothing written)."""
    source: int
    """The source's next id: every id it handed out is below it."""
    target_before: int
    target: int
    """The target's next id after the carry."""
    writes: int
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merge(a: CounterCarry, b: CounterCarry) -> CounterCarry:
    """Two carries of the same counter (two passes, two partitions) as one."""
    strongest = a if _RANK.get(a.carried, 0) >= _RANK.get(b.carried, 0) else b
    return CounterCarry(
        a.scheme, strongest.carried, max(a.source, b.source), min(a.target_before, b.target_before),
        max(a.target, b.target), a.writes + b.writes, max(a.seconds, b.seconds),
    )  # fmt: skip


def merge_into(into: dict[str, CounterCarry], more: dict[str, CounterCarry]) -> None:
    for path, carry in more.items():
        into[path] = merge(into[path], carry) if path in into else carry


class CounterCarryError(MetadataStoreError):
    """A counter the copy cannot carry safely."""


async def carry(source: Store, target: Store, path: str, rules: Rules) -> dict[str, CounterCarry]:
    """Carry the counter at ``path`` (for a node of a ledger-id generator: the whole generator)."""
    started = time.monotonic()
    root = rules.ledger_root_of(path)
    if root is not None and await jumps(source, target, root):
        out = await _carry_ledger_ids(source, target, root)
    else:
        scheme = SEQUENTIAL if root is None else LEDGER_IDS
        if root is not None and path == ledger_ids.long_path(root):
            return {}  # not a sequential parent itself (its HOB- children are named by hand)
        out = {path: await _carry_exact(source, target, path, scheme)}
    seconds = time.monotonic() - started
    for entry in out.values():
        entry.seconds = seconds
    return out


async def jumps(source: Store, target: Store, root: str) -> bool:
    """Whether the ledger-id generator under ``root`` is carried by a jump: not into a store that
    moves a counter in one write (exact costs as little there, and ids keep their pace), nor when
    its ledger manager takes 31-bit ids only."""
    return not target.sequence_counter_in_one_write and await ledger_ids.supports_long_ids(source, root)


async def _carry_exact(source: Store, target: Store, parent: str, scheme: str) -> CounterCarry:
    want = await issued_below(source, parent)
    before = await target.sequence_counter(parent)
    writes = await target.advance_sequence_counter(parent, want) if before < want else 0
    if await read_floor(target, parent) is not None:  # the agent hands out from it: raise it too
        writes += await raise_floor(target, parent, want)
    after = await target.sequence_counter(parent) if writes else before
    return CounterCarry(scheme, EXACT if writes else NONE, want, before, after, writes)


async def _carry_ledger_ids(source: Store, target: Store, root: str) -> dict[str, CounterCarry]:
    long = ledger_ids.long_path(root)
    bound = await ledger_ids.issued_bound(source, root)
    before = await ledger_ids.next_id(target, root)
    writes = 0
    if before < bound:
        try:
            writes = await ledger_ids.jump(source, target, root)
        except ledger_ids.NoRoomToJump as e:
            raise CounterCarryError(f"cannot carry the ledger-id generator: {e}", long) from None
    after = await ledger_ids.next_id(target, root) if before < bound else before
    if after < bound:  # (the HOB- node after the source's largest: never, unless it is full already)
        raise CounterCarryError(f"the ledger-id generator's next id {after} in the target is not above the "
                                f"source's {bound}", long)  # fmt: skip
    out = {long: CounterCarry(LEDGER_IDS, JUMP if writes else NONE, bound, before, after, writes)}
    live = await ledger_ids.live_counter(target, root)
    for parent in await ledger_ids.counters(source, root):
        if parent == live:  # the one the target's generator reads: the jump put it ahead already
            continue
        want = max(await issued_below(source, parent), await target.sequence_counter(parent))
        had = await read_floor(target, parent)
        raised = await raise_floor(target, parent, want)
        out[parent] = CounterCarry(LEDGER_IDS, FLOOR if raised else NONE, await issued_below(source, parent),
                                   -1 if had is None else had, max(had or 0, want), raised)  # fmt: skip
    return out


# ---- the check ------------------------------------------------------------------------------------


@dataclass
class CounterCheck:
    """A counter as the verification found it."""

    scheme: str
    carried: str
    """How its treatment carries it (``exact``, ``jump``, ``floor``)."""
    source: int
    target: int
    """The next id the target hands out: to Pulsar's generator reading it (the generator's
    entry), or through the agent (a counter's own: its floor when it has one)."""
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def check(source: Store, target: Store, path: str, rules: Rules) -> dict[str, CounterCheck]:
    """The promise itself, for the counter at ``path`` (a generator's node: the whole
    generator): the next id the target hands out is at or past the source's next one, so
    above every id the source handed out."""
    root = rules.ledger_root_of(path)
    if root is None:
        return {path: await _check_one(source, target, path, SEQUENTIAL, EXACT)}
    long = ledger_ids.long_path(root)
    if not await jumps(source, target, root):
        # each counter exact, and the generator as Pulsar's reads it: its next id above the source's
        bound = await ledger_ids.issued_bound(source, root)
        have = await ledger_ids.next_id(target, root)
        out = {long: CounterCheck(LEDGER_IDS, EXACT, bound, have, have >= bound)}
        if path != long:
            out[path] = await _check_one(source, target, path, LEDGER_IDS, EXACT)
        return out
    bound = await ledger_ids.issued_bound(source, root)
    have = await ledger_ids.next_id(target, root)
    out = {long: CounterCheck(LEDGER_IDS, JUMP, bound, have, have >= bound)}
    for parent in await ledger_ids.counters(source, root):
        out[parent] = await _check_one(source, target, parent, LEDGER_IDS, FLOOR)
    return out


async def _check_one(source: Store, target: Store, parent: str, scheme: str, carried: str) -> CounterCheck:
    want = await issued_below(source, parent)
    floor = await read_floor(target, parent)
    have = floor if floor is not None else await target.sequence_counter(parent)
    return CounterCheck(scheme, carried, want, have, have >= want)


def mismatch(path: str, state: CounterCheck) -> tuple[str, str, str]:
    """A failed check as the verification reports it: (path, ``counter``, detail)."""
    what = "next ledger id" if path.endswith("/" + ledger_ids.LONG) else "next sequential suffix"
    return path, "counter", f"{what} {state.target} in the target, {state.source} in the source"
