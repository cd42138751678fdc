"""The copy's progress as ``migrate status`` shows it: one JSON node in the source's protocol
subtree, written at most once a second unless a stage ends (a lost write is only a stale display)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from metashift.migration import paths
from metashift.spark.counters import LEDGER_IDS, CounterCarry
from metashift.stores import MetadataStoreError, Store

log = logging.getLogger(__name__)

#: Least time between two progress writes.
PROGRESS_EVERY = 1.0
#: Counters at most in the progress that ``status`` shows (``counters_total`` says how many there are).
COUNTERS_SHOWN = 50


class ProgressNode:
    """The progress node of one coordinator: the last body written, and the writes."""

    def __init__(self, source: Store) -> None:
        self.source = source
        self.shown: dict[str, object] = {}
        self._last = 0.0

    def report(self, body: Callable[[], dict[str, object]], *, force: bool = False) -> None:
        """Write ``body()`` unless one was written less than ``PROGRESS_EVERY`` ago (``force``:
        a stage ended, always)."""
        if not force and time.monotonic() - self._last < PROGRESS_EVERY:
            return
        self._last = time.monotonic()
        self.shown = body()
        task = asyncio.get_running_loop().create_task(self._write(json.dumps(self.shown).encode()))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # observed; failures are logged below

    async def _write(self, body: bytes) -> None:
        try:
            await self.source.put(paths.PROGRESS, body)
        except MetadataStoreError as e:
            log.debug("progress not written: %s", e)


def counters_shown(counters: dict[str, CounterCarry]) -> dict[str, dict[str, object]]:
    """The counters ``status`` shows: the ledger-id generators', then those that took the most
    writes, at most ``COUNTERS_SHOWN`` (a pattern may match many nodes; the flag's store keeps the
    progress node small)."""
    ranked = sorted(counters.items(), key=lambda kv: (kv[1].scheme != LEDGER_IDS, -kv[1].writes, kv[0]))
    return {p: c.to_dict() for p, c in sorted(ranked[:COUNTERS_SHOWN])}
