"""BookKeeper's ledger-id generator, read the way the generators themselves read it, and carried
by a jump.

The generators (Pulsar's ``PulsarLedgerIdGenerator`` in pulsar-metadata, BookKeeper's
``LongZkLedgerIdGenerator`` over ``ZkLedgerIdGenerator``), under a ledgers root ``R``:

- while ``R/idgen-long`` does not exist, an id is the suffix of a sequential child of
  ``R/idgen`` (``ID-``); a suffix at or past 2^31 - 1 (``Integer.MAX_VALUE``) makes them create
  ``R/idgen-long`` and switch to 63-bit ids;
- once ``R/idgen-long`` exists they take its children, parse each ``HOB-`` name as a number
  (``Long.parseLong(name.replace("HOB-", ""))``, names that do not parse ignored), take the
  largest ``h``, and hand out ``(h << 32) | suffix`` for a sequential child of
  ``R/idgen-long/HOB-%010d`` (no child: they create ``HOB-0000000001``); a suffix at or past
  2^31 - 1 makes them create ``HOB-(h+1)``. They keep the three largest ``HOB-`` nodes.

So an id space that jumps ahead is theirs already: a new ``HOB-(h+1)`` above every ``HOB-`` node
of the source makes every id the target hands out larger than every id the source handed out,
in two writes, whatever the counters behind them hold. The old counters (``R/idgen`` and the
source's ``HOB-`` nodes) are retired: Pulsar reading the target never uses them again, and a
client that still does (a cache from before the switch) gets its ids from their floors
(``metashift.stores.sequence_floors``) through the agent.

Only a cluster whose ledger manager hands out 31-bit ids alone (``R/LAYOUT`` naming BookKeeper's
legacy hierarchical or flat factory) gives no such room: its counters are carried exactly.
"""

from __future__ import annotations

import re

from metashift.stores import AlreadyExists, NotFound, Store, paths
from metashift.stores.sequence_floors import read_floor

SHORT = "idgen"
LONG = "idgen-long"
HOB_PREFIX = "HOB-"
#: ``Integer.MAX_VALUE``: a suffix at or past it is an overflow for both generators.
LOW_LIMIT = 2**31 - 1
#: Ledger manager factories (named in ``R/LAYOUT``) whose generator hands out 31-bit ids only.
SHORT_ONLY_FACTORIES = ("LegacyHierarchicalLedgerManagerFactory", "FlatLedgerManagerFactory")
_LONG_NUMBER = re.compile(r"[+-]?[0-9]+")


def hob_number(name: str) -> int | None:
    """``Long.parseLong(name.replace("HOB-", ""))``, ``None`` where Java throws."""
    text = name.replace(HOB_PREFIX, "")
    if not _LONG_NUMBER.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def hob_name(number: int) -> str:
    """``"HOB-" + String.format("%010d", (int) number)``."""
    return f"{HOB_PREFIX}{number:010d}"


def short_path(root: str) -> str:
    return paths.join(root, SHORT)


def long_path(root: str) -> str:
    return paths.join(root, LONG)


async def hobs(store: Store, root: str) -> list[int]:
    """The numbers of the ``HOB-`` children of ``R/idgen-long`` that the generators parse."""
    numbers = (hob_number(name) for name in await store.get_children(long_path(root)))
    return sorted(n for n in numbers if n is not None)


async def next_id(store: Store, root: str) -> int:
    """The id the generator reading ``store`` afresh hands out next."""
    if await store.exists(long_path(root)):
        numbers = await hobs(store, root)
        if not numbers:
            return 1 << 32  # it creates HOB-0000000001 and starts there
        high = numbers[-1]
        low = await store.sequence_counter(paths.join(long_path(root), hob_name(high)))
        return (high + 1) << 32 if low >= LOW_LIMIT else (high << 32) | low
    low = await store.sequence_counter(short_path(root))
    return 1 << 32 if low >= LOW_LIMIT else low


async def live_counter(store: Store, root: str) -> str | None:
    """The counter the generator reading ``store`` afresh uses next (``None``: a ``HOB-`` node
    it would create first)."""
    if not await store.exists(long_path(root)):
        return short_path(root)
    numbers = await hobs(store, root)
    return paths.join(long_path(root), hob_name(numbers[-1])) if numbers else None


async def counters(store: Store, root: str) -> list[str]:
    """The generator's counters present in ``store``: ``R/idgen`` and every ``HOB-`` node."""
    found = [short_path(root)] if await store.exists(short_path(root)) else []
    long = long_path(root)
    return found + [paths.join(long, name) for name in sorted(await store.get_children(long))]


async def issued_below(store: Store, parent: str) -> int:
    """Every suffix ``store`` handed out under ``parent`` is below this: its own counter, or the
    floor the agent hands out from when a migration retired the counter, whichever is higher."""
    own = await store.sequence_counter(parent)
    floor = await read_floor(store, parent)
    return max(own, floor or 0)


async def issued_bound(store: Store, root: str) -> int:
    """Every ledger id ``store``'s generator handed out is below this: the id it hands out next,
    and the ids handed out from the floors of its retired counters."""
    bound = await next_id(store, root)
    for parent in await counters(store, root):
        floor = await read_floor(store, parent)
        if floor is None:
            continue
        name = parent.rsplit(paths.SEPARATOR, 1)[1]
        high = hob_number(name) if name.startswith(HOB_PREFIX) else None
        bound = max(bound, floor if high is None else (high << 32) | floor)
    return bound


async def supports_long_ids(store: Store, root: str) -> bool:
    """Whether the cluster's ledger manager takes 63-bit ids (so the jump is safe): not when
    ``R/LAYOUT`` names a factory whose generator hands out 31-bit ids only."""
    got = await store.get(paths.join(root, "LAYOUT"))
    text = got[0].decode(errors="replace") if got is not None else ""
    return not any(name in text for name in SHORT_ONLY_FACTORIES)


class NoRoomToJump(Exception):
    """The ``HOB-`` numbers reached 2^31 - 1: no larger one exists for the generators."""


async def jump(source: Store, target: Store, root: str) -> int:
    """Give ``target`` the ``HOB-`` node after the source's largest (and ``R/idgen-long``), so
    that its generator's next id is above every id the source handed out. The node is named by
    the source alone: copies that jump at once (two partitions meeting the same generator) make
    the same node, and one that finds a node that high in the target already does nothing.
    Returns the number of writes."""
    number = max([0, *await hobs(source, root)]) + 1
    if number > LOW_LIMIT:
        raise NoRoomToJump(f"{long_path(root)} already holds {hob_name(number - 1)}")
    if max([0, *await hobs(target, root)]) >= number and await target.exists(long_path(root)):
        return 0
    writes = await _create(target, long_path(root))
    return writes + await _create(target, paths.join(long_path(root), hob_name(number)))


async def _create(store: Store, path: str) -> int:
    """Create ``path`` empty unless it exists (with its parents on a store that needs them)."""
    try:
        await store.put(path, b"", -1)
        return 1
    except AlreadyExists:
        return 0
    except NotFound:
        made = 0
        for ancestor in paths.ancestors(path):
            made += await _create(store, ancestor)
        return made + await _create(store, path)
