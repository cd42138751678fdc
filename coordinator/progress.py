"""The copy's progress as ``migrate status`` shows it: one JSON node in the source's protocol
subtree, written at most once a second unless a stage ends (a lost write is only a stale display)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from metashift.copy.counters import LEDGER_IDS, CounterCarry
from metashift.copy.report import CopyReport
from metashift.migration import paths
from metashift.stores import MetadataStoreError, Store

log = logging.getLogger(__name__)

#: Least time between two progress writes.
PROGRESS_EVERY = 1.0
#: Most seconds a phase's write waits for the progress before it to be written.
PROGRESS_FLUSH_S = 2.0
#: Counters at most in the progress that ``status`` shows (``counters_total`` says how many there are).
COUNTERS_SHOWN = 50
#: Passes whose times the progress shows (the latest).
TIMINGS_SHOWN = 20


class ProgressNode:
    """The progress node of one coordinator: the last body written, and the writes, one at a time
    and in order (two in flight could land the older last: a COMPLETED migration shown unverified)."""

    def __init__(self, source: Store) -> None:
        self.source = source
        self.shown: dict[str, object] = {}
        self._last = 0.0
        self._pending: bytes | None = None
        self._writer: asyncio.Task[None] | None = None

    def report(self, body: Callable[[], dict[str, object]], *, force: bool = False) -> None:
        """Write ``body()`` unless one was written less than ``PROGRESS_EVERY`` ago (``force``:
        a stage ended, always); a body not yet written when a newer one comes is skipped."""
        if not force and time.monotonic() - self._last < PROGRESS_EVERY:
            return
        self._last = time.monotonic()
        self.shown = body()
        self._pending = json.dumps(self.shown).encode()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_pending(), name="progress")
            self._writer.add_done_callback(lambda t: t.cancelled() or t.exception())  # observed

    async def flush(self, within: float) -> None:
        """Wait until the last body reported is written (or failed to be), at most ``within``
        seconds: what ``status`` shows once the phase that follows is written."""
        writer = self._writer
        if writer is not None and not writer.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(writer), within)

    async def _write_pending(self) -> None:
        while self._pending is not None:
            body, self._pending = self._pending, None
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


def pass_timing(kind: str, number: int, seconds: float, *, paths: int | None = None,
                report: CopyReport | None = None) -> dict[str, object]:
    """One pass's times as ``status`` shows them: its kind (``full``, ``delta``, ``final``), its
    wall time and, for a Spark pass, the stages of its copy job (``process``: the wall time outside
    the job's copy and verification, such as starting the job's process; ``spark_ready``: Spark's
    context up, started beside the listing; then listing the tree, copying, compaction,
    verification)."""
    timing: dict[str, object] = {"pass": number, "kind": kind, "seconds": round(seconds, 3)}
    if paths is not None:
        timing["paths"] = paths
    if report is not None:
        verify = report.verify
        verify_seconds = verify.seconds if verify is not None else 0.0
        # the job's own seconds end before its verification: both are inside the pass's seconds
        stages = {
            "process": max(seconds - report.seconds - verify_seconds, 0.0),
            "spark_ready": report.timeline.get("spark_ready", 0.0),
            "listing": report.listing_seconds,
            "copy": report.copy_seconds,
            "compaction": report.compaction_seconds,
            "verify": verify_seconds,
        }
        timing["stages"] = {k: round(v, 3) for k, v in stages.items()}
        # what the pass did, for the account of the whole migration (``migration_text``)
        timing["nodes"] = report.nodes
        timing["verified"] = verify.nodes if verify is not None else 0
    return timing


def migration_text(timings: list[dict[str, Any]]) -> str:
    """The whole migration's copy in a line, from its passes: the full passes' nodes copied and
    verified, the delta rounds' paths, the final check's."""
    full = [t for t in timings if t.get("kind") == "full"]
    deltas = [t for t in timings if t.get("kind") == "delta"]
    final = [t for t in timings if t.get("kind") == "final"]
    parts = []
    if full:
        last = full[-1]
        parts.append(f"{len(full)} full pass(es), the last {last.get('nodes', 0)} nodes copied and "
                     f"{last.get('verified', 0)} verified")
    if deltas:
        parts.append(f"{len(deltas)} delta round(s), {sum(int(t.get('paths') or 0) for t in deltas)} path(s) carried")
    if final:
        parts.append(f"final check of {int(final[-1].get('paths') or 0)} path(s) passed")
    return "; ".join(parts) or "no pass recorded"


def timing_text(timing: dict[str, Any]) -> str:
    """One pass's time: ``pass 1 full 41.2s (process 6.1, spark_ready 9.0, ...)``."""
    text = f"pass {timing.get('pass')} {timing.get('kind'):<5} {float(timing.get('seconds') or 0):.1f}s"
    if timing.get("paths") is not None:
        text += f", {timing['paths']} path(s)"
    stages = timing.get("stages") or {}
    if stages:
        text += " (" + ", ".join(f"{k} {float(v):.1f}" for k, v in stages.items()) + ")"
    return text
