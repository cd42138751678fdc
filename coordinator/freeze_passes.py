"""The passes of the freeze and after it: COPYING's last delta (``final``), and what a writer
bypassing the agents left in the source before the COMPLETED write (``settle``)."""

from __future__ import annotations

import logging
import time

from metashift.copy.delta import check
from metashift.migration import paths
from metashift.migration.flag import MigrationFlag, now_ms

from .copy_runner import CopyOutcome
from .delta_rounds import BARRIER_SECONDS, DeltaRounds
from .member_guard import MemberGuard
from .pass_results import FreezeBroken, PassResult, Unreachable

log = logging.getLogger(__name__)


class FreezePasses(DeltaRounds):
    """The freeze's passes of ``Passes`` (which holds the state named here)."""

    spark_delta_threshold: int
    freeze_outage_timeout: float
    _final_changed: set[str]
    guard: MemberGuard

    async def _full_pass(self, flag: MigrationFlag, stage: str, *,
                         early_delta: bool = False) -> tuple[CopyOutcome, str | None]:
        raise NotImplementedError

    # ---- COPYING -------------------------------------------------------------------------------

    async def _barrier(self) -> None:
        """Every change written to the source before now has reached the tracker
        (``ChangeTracker.barrier`` on the protocol's barrier node); ``TimeoutError`` otherwise.
        Every write of the cluster waits for it: a store that takes longer than its silence is
        allowed inside the freeze (``participant_timeout``) fails the migration instead."""
        within = min(BARRIER_SECONDS, self.freeze_outage_timeout)
        await self.tracker.barrier(paths.BARRIER, str(now_ms()).encode(), within)

    async def final(self, flag: MigrationFlag) -> PassResult:
        """The freeze's last delta: barrier, carry, check, and the source still frozen."""
        if self.tracker.broken is not None:
            return PassResult(f"the delta cannot be trusted inside the freeze: {self.tracker.broken}", self.passes)
        # a coordinator that took over without following the source since a round it saw begin
        # (``ChangeTracker``) does not know what changed: its last pass is a full one
        whole = not self.tracker.trusted
        if whole:
            log.warning("this coordinator did not follow the source since the last round of changes: the "
                        "freeze's last pass is a full one")
            self.tracker.start()  # from here on, a write into the frozen source is a violation
            await self.tracker.ready()
        else:
            try:
                await self._barrier()
            except TimeoutError:
                within = min(BARRIER_SECONDS, self.freeze_outage_timeout)
                return PassResult(f"the barrier write or its notification did not come back within {within:g}s "
                                  "inside the freeze: the change stream broke or the source stalled")
        # a member that joined around the agents since the last look: the last chance before COMPLETED
        joined = await (self.guard.scan(flag) if whole else self.guard.check(flag))
        if joined is not None:
            return PassResult(joined, self.passes)
        # kept until carried and checked: a store that stops answering midway means trying again
        self._final_changed |= set(self.tracker.take())
        changed = set(self._final_changed)
        began, report = time.monotonic(), None
        if whole or len(changed) >= self.spark_delta_threshold:
            try:
                outcome, _ = await self._full_pass(flag, "final pass")
            except FreezeBroken as e:
                return PassResult(str(e), self.passes)
            if outcome.error and outcome.unreachable:
                raise Unreachable(outcome.error)
            report = outcome.report  # the final timing shows the Spark pass's stages
            if whole:  # what differs is what changed: carried (deletions too) and checked below
                changed |= {m.path for m in outcome.mismatches}
                self._final_changed |= changed
            # the copy never deletes: what was deleted in the source still differs, and is carried next
            unexpected = [m for m in outcome.mismatches if m.path not in changed]
            if outcome.error or unexpected:
                return PassResult(outcome.failure(), self.passes)
        # a write that bypassed the agents in the freeze is the reason, not what it left unequal
        failure = await self._carry_and_check(flag, changed, "verification of the last changes", frozen=True)
        self._final_changed.clear()  # carried and checked, or the migration fails: nothing to try again
        if failure is not None:
            return PassResult(failure, self.passes)
        self._timed("final", time.monotonic() - began, paths=len(changed), report=report)
        self._report(flag, "verified", len(changed), len(changed), verified=True, force=True)
        return PassResult(None, self.passes)

    # ---- COMPLETED, not yet released ----------------------------------------------------------

    async def settle(self, flag: MigrationFlag) -> str | None:
        """What the source got after the last check and before the COMPLETED write (a writer
        bypassing the agents), carried and checked while the agents still hold every write: the
        tracker's paths after a barrier, or, for a leader that did not follow the source since the
        last pass, what a full pass finds different. Returns what could not be carried; a store
        that does not answer raises (the outcome is decided: the caller waits)."""
        if self.tracker.trusted:
            await self._barrier()
            changed = self._final_changed | set(self.tracker.take())
        else:
            log.warning("COMPLETED, not released: no trusted change stream here (%s); a full pass finds what differs",
                        self.tracker.broken or "not followed since the last pass")
            outcome, _ = await self._full_pass(flag, "settling pass")
            if outcome.error:
                if outcome.unreachable:
                    raise Unreachable(outcome.error)
                return outcome.failure()
            changed = {m.path for m in outcome.mismatches}
        if not changed:
            return None
        log.warning("%d path(s) written in the source after the last check, before COMPLETED (bypassing the "
                    "agents): carrying them", len(changed))
        failure = await self._carry_and_check(flag, changed, "verification of what was carried after COMPLETED")
        self._final_changed.clear()  # the outcome is decided: what failed is named, not tried again
        return failure

    async def _carry_and_check(self, flag: MigrationFlag, changed: set[str], checked: str, *,
                               frozen: bool = False) -> str | None:
        """Carry ``changed`` over and check exactly those paths: why that failed (what could not
        be carried; with ``frozen``, a write into the frozen source first; then the first path
        still unequal, after ``checked``), or ``None``."""
        # one session on the target for the carry and its check: a secured store's open (TLS,
        # SASL, a bcrypt-checked etcd login) is paid once inside the freeze, not twice
        target = await self._open_target(flag.target_url)
        try:
            failure = await self._carry(flag, changed, target)
            if failure is not None:
                return failure
            mismatches = await check(self.source, target, changed, self.rules)
            violation = await self.tracker.violation(target) if frozen else None
        finally:
            await target.close()
        if violation is not None:
            return violation
        if mismatches:
            return f"{checked}: {mismatches[0].path}: {mismatches[0].detail}"
        return None
