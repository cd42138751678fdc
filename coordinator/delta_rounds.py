"""The delta rounds of SYNCING: carry what changed in the source since the last round, through
the store layer, while writes flow; standbys learn what each round carried from its markers
(``carrying`` before it is taken, ``carried`` once it is in the target: ``ChangeTracker``)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable

from metashift.copy.counters import CounterCarry, merge_into
from metashift.copy.delta import carry
from metashift.copy.report import CopyReport
from metashift.copy.rules import Rules
from metashift.migration import paths
from metashift.migration.flag import MigrationFlag
from metashift.stores import NotFound, Store

from .change_tracker import ChangeTracker

log = logging.getLogger(__name__)

#: Delta passes at most in SYNCING before the freeze (they stop earlier when the set stops shrinking).
MAX_DELTA_PASSES = 5
#: Longest wait for the barrier's own notification.
BARRIER_SECONDS = 15.0


class DeltaRounds:
    """The delta rounds of ``Passes`` (which holds the state named here)."""

    source: Store
    tracker: ChangeTracker
    rules: Rules
    passes: int
    counters: dict[str, CounterCarry]
    _rounds: int
    _open_target: Callable[[str], Awaitable[Store]]
    _still_leader: Callable[[], Awaitable[None]]
    _fence: Callable[[], None] | None

    def _report(self, flag: MigrationFlag, stage: str, done: int, total: int, *, verified: bool = False,
                force: bool = False) -> None:
        raise NotImplementedError

    def _timed(self, kind: str, seconds: float, *, paths: int | None = None,
               report: CopyReport | None = None, at: int | None = None) -> None:
        raise NotImplementedError

    async def _members_joined(self, flag: MigrationFlag, *, wait: bool = False) -> str | None:
        raise NotImplementedError

    async def _deltas(self, flag: MigrationFlag) -> str | None:
        previous: int | None = None
        for _ in range(MAX_DELTA_PASSES):
            carried, failure = await self._delta_round(flag)
            failure = failure or await self._members_joined(flag)
            if failure is not None:
                return failure
            if carried is None:
                return None
            if previous is not None and carried >= previous:
                return None  # not shrinking: the freeze carries the rest
            previous = carried
        return None

    async def _delta_round(self, flag: MigrationFlag) -> tuple[int | None, str | None]:
        """Carry what changed since the last round: (how many paths, or None when none changed or
        the stream broke; the failure, if any)."""
        self._rounds += 1
        # standbys forget what this round carries (``ChangeTracker``): mark where it begins
        marker = json.dumps({"epoch": flag.epoch, "pass": self.passes, "round": self._rounds}).encode()
        try:
            await self.tracker.barrier(paths.CARRYING, marker, BARRIER_SECONDS)
        except TimeoutError:
            return None, None  # the stream broke: the caller sees it and runs another full pass
        changed = self.tracker.take()
        if not changed:
            return None, None
        began = time.monotonic()
        failure = await self._carry(flag, set(changed))
        self._timed("delta", time.monotonic() - began, paths=len(changed))
        if failure is None:
            await self.source.put(paths.CARRIED, marker)
        return len(changed), failure

    async def _subtrees(self, roots: list[str]) -> set[str]:
        """``roots`` and every node the source holds below them (a conflict's subtree)."""
        found = set(roots)
        for root in roots:
            with contextlib.suppress(NotFound):  # deleted again since: the carry deletes it
                async for page in self.source.walk(root):
                    found.update(node.path for node in page)
        return found

    async def _carry(self, flag: MigrationFlag, changed: set[str], target: Store | None = None) -> str | None:
        """Carry ``changed`` over, into ``target`` when the caller holds it open (else a store
        opened for this carry): what could not be carried, or ``None``."""
        await self._still_leader()
        store = target if target is not None else await self._open_target(flag.target_url)
        try:
            report = await carry(self.source, store, changed, self.rules, self._fence)
        finally:
            if target is None:
                await store.close()
        merge_into(self.counters, report.counters)
        self._report(flag, "delta", report.paths, report.paths, force=True)
        log.info("carried %d changed path(s): %d written, %d deleted", report.paths, report.written, report.deleted)
        if report.conflicts:
            path, why = report.conflicts[0]
            return f"cannot carry {path} over: {why}"
        return None
