"""``SequenceCounters``: the counters behind sequential children on etcd (a parent key's
version), read and raised by many blind puts (``repeat``), the history compacted on the way."""

from __future__ import annotations

from typing import Any

from aetcd import rpc

from .. import paths
from ..errors import MetadataStoreError
from .connection import EtcdConnection
from .history import History
from .keys import Keys
from .operations import Operations
from .repeat import Chain, repeat_puts
from .txn_budget import TxnBudget

#: Steps of a sequence counter between two compactions of the history (~50 MB of it).
COMPACT_EVERY_STEPS = 1_000_000


class SequenceCounters:
    """Reads a parent key's version (the next sequential suffix under it) and raises it."""

    def __init__(
        self, conn: EtcdConnection, keys: Keys, operations: Operations, history: History, budget: TxnBudget
    ) -> None:
        self._conn = conn
        self._keys = keys
        self._operations = operations
        self._history = history
        self._budget = budget

    async def children_version(self, path: str) -> int | None:
        """The stored etcd version of the key of ``path``: the counter behind sequential children of
        ``path`` (the next sequential put under ``path`` gets this number as its suffix, 0 when
        ``None``, the key being absent). For the bulk copy, to carry counters over."""
        resp = await self._conn.range(path, rpc.RangeRequest(key=self._keys.key(paths.validate(path))))
        return int(resp.kvs[0].version) if resp.kvs else None

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        return await self.advance_sequence_counters({parent: at_least})

    async def advance_sequence_counters(self, wanted: dict[str, int]) -> int:
        """Each counter is its parent key's version: blind puts of the key's own value (their
        order does not matter, all write the same bytes), one request per step and many in
        flight, the steps of several counters sharing txns (``repeat_puts``), until each
        reaches its target. Every ``COMPACT_EVERY_STEPS`` steps the history is compacted (in
        the background), so that a counter of any size fits in the server's quota."""
        chains: list[Chain] = []
        for parent, at_least in sorted(wanted.items()):
            paths.validate(parent)
            counter = await self.children_version(parent) or 0
            if counter >= at_least:
                continue
            current = await self._operations.get(parent)
            value = current[0] if current is not None else b""
            chains.append((self._keys.key(parent), value, at_least - counter, parent))
        total = 0
        while chains:
            # a slice of at most COMPACT_EVERY_STEPS steps, shared out over the chains
            budget = COMPACT_EVERY_STEPS
            now: list[Chain] = []
            later: list[Chain] = []
            for key, value, count, tag in sorted(chains, key=lambda c: c[2]):
                share = min(count, max(1, budget // (len(chains) - len(now))))
                budget -= share
                now.append((key, value, share, tag))
                if count > share:
                    later.append((key, value, count - share, tag))
            failed: dict[Any, MetadataStoreError] = {}
            await repeat_puts(self._conn, now, failed, self._budget.ops, self._budget.bytes)
            if failed:
                raise next(iter(failed.values()))
            total += sum(c[2] for c in now)
            chains = later
            if chains:
                await self._history.compact_history(wait=False)
        return total
