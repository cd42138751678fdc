"""Floors of retired sequence counters: where the next sequential id of a counter comes from when
its own counter was left behind on purpose.

A migration carries BookKeeper's ledger-id generator by a jump (a new ``HOB-`` node above every
id the source handed out: O(1) writes) instead of raising every one of its counters step by step.
Pulsar's own generator reading the target never uses the old counters again (it takes the largest
``HOB-`` node), but a client that cached what it read before the switch still creates sequential
nodes under them through the agent. For each such retired counter the copy leaves a floor in the
target: one node whose value holds the next id to hand out, at least the source's. The agent's
sequential creates under a parent with a floor take their id from it (a compare-and-set of the
value), so even a stale client gets ids above every id the source handed out.

The floors live under metashift's own subtree (``reserved``), which the copy never copies and
the freeze watch ignores: ``/metashift/sequence-floors/<parent, %-encoded>``, JSON
``{"parent": "/ledgers/idgen", "next": 1234}``. An older metashift kept them below
``/pulsar/migration-coordinator``: those are still read, and the first id taken moves such a floor
to its new place. Only the API of ``MetadataStore`` is used.
"""

from __future__ import annotations

import json
from urllib.parse import quote, unquote

from . import paths, reserved
from .api import MetadataStore
from .errors import AlreadyExists, BadVersion, NotFound

#: Where an older metashift kept the floors.
LEGACY_FLOORS_ROOT = f"{reserved.LEGACY_ROOT}/sequence-floors"
#: Compare-and-set attempts of a floor that keeps moving under us.
_ATTEMPTS = 100


def floors_root() -> str:
    """The parent of every floor: ``sequence-floors`` below metashift's own root."""
    return f"{reserved.own_root()}/sequence-floors"


def floor_path(parent: str, root: str | None = None) -> str:
    """The node of ``parent``'s floor (below ``root``, ``floors_root()`` by default)."""
    return f"{root or floors_root()}/{quote(paths.validate(parent), safe='')}"


def _encode(parent: str, next_id: int) -> bytes:
    return json.dumps({"parent": parent, "next": next_id}, separators=(",", ":")).encode()


def _decode(parent: str, value: bytes) -> int:
    try:
        body = json.loads(value)
        next_id = body["next"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"the sequence floor of {parent} is malformed: {value[:80]!r}") from None
    if not isinstance(next_id, int) or next_id < 0:
        raise ValueError(f"the sequence floor of {parent} is malformed: {value[:80]!r}")
    return next_id


async def read_floor(store: MetadataStore, parent: str) -> int | None:
    """The next id ``parent``'s floor hands out (the higher of its place and its older place);
    ``None`` when it has none."""
    found = [_decode(parent, got[0]) for root in (floors_root(), LEGACY_FLOORS_ROOT)
             if (got := await store.get(floor_path(parent, root))) is not None]
    return max(found) if found else None


async def floored_parents(store: MetadataStore) -> set[str]:
    """Every parent that has a floor in ``store`` (at its place or its older place)."""
    names = set(await store.get_children(floors_root())) | set(await store.get_children(LEGACY_FLOORS_ROOT))
    return {unquote(name) for name in names}


async def raise_floor(store: MetadataStore, parent: str, at_least: int) -> int:
    """Make ``parent``'s floor hand out ``at_least`` or more next (a floor never goes down).
    Returns the number of writes it took (0 when it was already there)."""
    path = floor_path(parent)
    writes = 0
    for _ in range(_ATTEMPTS):
        got = await store.get(path)
        try:
            if got is None:
                try:
                    await store.put(path, _encode(parent, at_least), -1)
                except NotFound:  # a store that keeps parents (ZooKeeper): make them, empty
                    writes += await _make_ancestors(store, path)
                    await store.put(path, _encode(parent, at_least), -1)
                return writes + 1
            if _decode(parent, got[0]) >= at_least:
                return writes
            await store.put(path, _encode(parent, at_least), got[1].version)
            return writes + 1
        except BadVersion:  # (AlreadyExists too) moved under us: read it again
            continue
    raise BadVersion(path, "the sequence floor kept moving while it was raised")


async def take_from_floor(store: MetadataStore, parent: str) -> int | None:
    """The next id of ``parent``'s floor, taken (the floor moves one up); ``None`` when
    ``parent`` has no floor. A floor at its older place is raised at its place first (floors only
    go up: the higher of the two is the floor)."""
    path = floor_path(parent)
    legacy = await store.get(floor_path(parent, LEGACY_FLOORS_ROOT))
    if legacy is not None:
        await raise_floor(store, parent, _decode(parent, legacy[0]))
    for _ in range(_ATTEMPTS):
        got = await store.get(path)
        if got is None:
            return None
        next_id = _decode(parent, got[0])
        try:
            await store.put(path, _encode(parent, next_id + 1), got[1].version)
        except BadVersion:
            continue
        return next_id
    raise BadVersion(path, "the sequence floor kept moving: too many sequential creates at once")


async def _make_ancestors(store: MetadataStore, path: str) -> int:
    made = 0
    for ancestor in paths.ancestors(path):
        try:
            await store.put(ancestor, b"", -1)
            made += 1
        except AlreadyExists:
            pass
    return made
