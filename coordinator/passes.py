"""The coordinator's copy passes: the online pre-copy of SYNCING and the last delta of the freeze.

SYNCING, while writes flow: follow the source's changes from before the bulk copy starts, run
the Spark copy with its verification, carry the paths that changed meanwhile again (and again,
while the set shrinks), and accept only mismatches on paths that changed since the pass began.
A break in the change stream means another full pass. A store that does not answer (the copy
failed on it, or a probe finds it down) means waiting for it and another full pass, up to
``outage_timeout`` from the first failure; only past it does the migration fail.

COPYING, inside the freeze, and the settling after COMPLETED: ``freeze_passes``; the delta rounds
of SYNCING: ``delta_rounds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable

from metashift.copy.counters import CounterCarry, merge_into
from metashift.copy.report import CopyReport, Mismatch
from metashift.copy.rules import Rules
from metashift.migration import paths
from metashift.migration.flag import MigrationFlag, now_ms, read_flag
from metashift.stores import Store, StoreUnavailable, StoreURL
from metashift.stores import paths as store_paths

from .change_tracker import ChangeTracker
from .copy_runner import CopyOutcome, CopyRunner
from .freeze_passes import FreezePasses
from .member_guard import MemberGuard
from .outage import Reachability
from .pass_results import Abandoned, FreezeBroken, MembersJoined, PassResult, Unreachable
from .progress import PROGRESS_FLUSH_S, TIMINGS_SHOWN, ProgressNode, counters_shown, pass_timing
from .store_copy import StoreCopyRunner

log = logging.getLogger(__name__)

#: How often a running copy is checked on (leadership, flag, freeze).
POLL_SECONDS = 0.5
#: Full passes at most in SYNCING (each one after a break of the change stream).
MAX_FULL_PASSES = 5
#: How often an unreachable store is probed again in SYNCING.
OUTAGE_POLL_SECONDS = 1.0
#: Full passes in a row that failed on a store that answered again at once, before the migration fails.
MAX_OUTAGE_PASSES = 10


class Passes(FreezePasses):
    """The copy work of one coordinator: full passes on Spark, delta passes on the store layer."""

    def __init__(
        self,
        source: Store,
        tracker: ChangeTracker,
        *,
        source_url: StoreURL,
        target_url: Callable[[str], StoreURL],
        open_target: Callable[[str], Awaitable[Store]],
        still_leader: Callable[[], Awaitable[None]],
        leader_fence: Callable[[], None] | None = None,
        leader_lease: Callable[[], float] | None = None,
        spark_master: str | None,
        copy_engine: str,
        spark_delta_threshold: int,
        outage_timeout: float,
        freeze_outage_timeout: float,
        rules: Rules | None = None,
    ) -> None:
        self.source = source
        self.tracker = tracker
        self.source_url = source_url
        self._target_url = target_url
        self._open_target = open_target
        self._still_leader = still_leader
        self._fence = leader_fence
        """Raises once this coordinator may no longer write into the target (its leader lease ran out)."""
        self._lease = leader_lease
        """The leader lease's end (``time.monotonic()``): a copy job may not outlive it."""
        self.spark_master = spark_master
        self.copy_engine = copy_engine
        """``spark`` or ``store``: what runs a full pass (``CoordinatorSettings.copy_engine``)."""
        self.spark_delta_threshold = spark_delta_threshold
        self.outage_timeout = outage_timeout
        self.freeze_outage_timeout = freeze_outage_timeout
        self.reachability = Reachability(source, open_target)
        self._outage_passes = 0
        self._final_changed: set[str] = set()
        """The freeze's last delta, taken from the tracker, not yet carried and checked."""
        self.rules = rules or Rules()
        self.passes = 0
        self._rounds = 0
        """Delta rounds carried in this migration (each round's markers name it)."""
        self.counters: dict[str, CounterCarry] = {}
        """What every pass of this migration did to each counter (``migrate status`` shows it)."""
        self.timings: list[dict[str, object]] = []
        """How long each pass took, and each stage of a Spark pass (``migrate status`` shows it)."""
        self._progress = ProgressNode(source)
        self.guard = MemberGuard(source, tracker)
        """Members joining around the agents fail the migration (``member_guard``)."""
        self._scan: asyncio.Task[str | None] | None = None
        """This full pass's look at every live ephemeral of the source."""

    # ---- SYNCING -------------------------------------------------------------------------------

    async def sync(self, flag: MigrationFlag) -> PassResult:
        """Full passes until one ran with an unbroken change stream, then delta passes; a store
        that does not answer costs a wait and another full pass (``outage_timeout`` at most)."""
        broken_passes = 0
        while True:
            if broken_passes >= MAX_FULL_PASSES:
                return PassResult(f"no full pass came through clean in {self.passes}: the change stream kept "
                                  "breaking or nodes kept being deleted and created again", self.passes)
            try:
                result = await self._sync_once(flag)
            except (Unreachable, StoreUnavailable) as e:
                self._stop_scan()
                failure = await self._wait_out(flag, str(e))
                if failure is not None:
                    return PassResult(failure, self.passes)
                continue  # another full pass, not counted against MAX_FULL_PASSES: nothing was wrong with the data
            self._stop_scan()  # an abandoned pass's (the next one scans again)
            if result is None:
                broken_passes += 1
                continue
            self._outage_passes = 0
            return result

    async def _sync_once(self, flag: MigrationFlag) -> PassResult | None:
        """One full pass and the delta passes after it: the result, or ``None`` for another full
        pass. ``Unreachable`` (or a store's ``StoreUnavailable``) when a store did not answer."""
        self.tracker.start()  # before the bulk copy: nothing that changes during it is missed
        await self.tracker.ready()
        self._final_changed.clear()
        # every live ephemeral, beside the copy; what is created from now on, the tracker sees
        self._scan = asyncio.get_running_loop().create_task(self.guard.scan(flag), name="member-scan")
        # every standby follows from here on too (``ChangeTracker``): it can finish the freeze
        await self.source.put(paths.PASS, json.dumps({"epoch": flag.epoch, "pass": self.passes + 1}).encode())
        self.passes += 1
        began, at = time.monotonic(), len(self.timings)
        try:
            outcome, early = await self._full_pass(flag, f"pass {self.passes}", early_delta=True)
        except MembersJoined as e:
            return PassResult(str(e), self.passes)
        # in the order the passes began: the first delta round ran beside this pass's verification
        self._timed("full", time.monotonic() - began, report=outcome.report, at=at)
        if outcome.error and (outcome.unreachable or await self.reachability.probe(flag.target_url)):
            raise Unreachable(outcome.error)
        if self.tracker.broken is not None:
            # also what made the pass itself fail, if it did (the store went away a moment)
            log.warning("full pass %d: %s; running another full pass", self.passes, self.tracker.broken)
            return None
        if outcome.conflicts:
            # In SYNCING the target holds only what this migration's passes wrote (it was empty
            # at the start; agents write there from PREPARATION on), so a node it has ahead of
            # the source was deleted and created again in the source since a pass copied it,
            # seen by this pass's change stream or not (before it began: a broken stream, a
            # coordinator that took over). The copy wrote nothing at or below them: carry those
            # subtrees whole, now. Under clients that delete and create all the time every full
            # pass meets some, so this must not cost another full pass.
            if (failure := await self._carry(flag, await self._subtrees(outcome.conflicts))) is not None:
                return PassResult(failure, self.passes)
        if early is not None:
            return PassResult(early, self.passes)
        if not outcome.ok and not outcome.verified:
            return PassResult(outcome.failure(), self.passes)
        # the copy never deletes: what only the target has, the source deleted after an earlier
        # pass copied it; a full pass leaves the target equal to the source, deletions included
        stale = [m.path for m in outcome.mismatches if m.kind == "extra" and m.path not in self.tracker.since_pass
                 and not _under(m.path, outcome.conflicts)]
        if stale:
            log.info("full pass %d: %d node(s) only in the target, deleted in the source since an earlier "
                     "pass: removing them", self.passes, len(stale))
            self.tracker.add_stale(stale)
        failure = await self._deltas(flag) or await self._members_joined(flag, wait=True)
        if failure is not None:
            return PassResult(failure, self.passes)
        unexpected = [m for m in outcome.mismatches
                      if not self._expected(m) and not _under(m.path, outcome.conflicts)]
        if unexpected:
            m = unexpected[0]
            return PassResult(
                f"verification while writes flowed: {m.path} ({m.kind}: {m.detail}) "
                f"did not change since the copy and still differs", self.passes,
            )
        if self.tracker.broken is not None:
            return None
        return PassResult(None, self.passes)

    def _stop_scan(self) -> None:
        if self._scan is not None:
            self._scan.cancel()
            self._scan = None

    async def _members_joined(self, flag: MigrationFlag, *, wait: bool = False) -> str | None:
        """Why the migration must fail because a member joined around the agents, or ``None``:
        this pass's scan, once it is done (``wait``: wait for it), and the nodes created since the
        last look (``MemberGuard``)."""
        scan = self._scan
        if scan is not None and (wait or scan.done()):
            self._scan = None
            if (why := await scan) is not None:
                return why
        return await self.guard.check(flag)

    async def _wait_out(self, flag: MigrationFlag, error: str) -> str | None:
        """A store did not answer in SYNCING: wait until both do (then ``None``: another full pass)
        or until ``outage_timeout`` has passed since they stopped answering (then the failure)."""
        reach = self.reachability
        why = await reach.probe(flag.target_url)
        if why is None:
            # both answer again already: another pass, but not for ever on a copy that keeps failing so
            self._outage_passes += 1
            if self._outage_passes > MAX_OUTAGE_PASSES:
                return f"the copy kept failing on an unreachable store ({self._outage_passes} passes): {error}"
        else:
            log.warning("a store did not answer in SYNCING (%s); waiting up to %gs for it, then another full pass",
                        why, self.outage_timeout)
        while why is not None:
            if reach.down_for > self.outage_timeout:
                return f"{why} for more than {self.outage_timeout:g}s (coordinator.outage_timeout); {error}"
            self._report(flag, "waiting for an unreachable store", 0, 0, force=True)
            await asyncio.sleep(OUTAGE_POLL_SECONDS)
            why = await reach.probe(flag.target_url)
        await self._still_leader()
        current = await read_flag(self.source)
        if current is None or current.version != flag.version:
            raise Abandoned()
        log.info("both stores answer: another full pass")
        return None

    def _expected(self, mismatch: Mismatch) -> bool:
        """A mismatch on a path that changed since the pass began (carried in the freeze)."""
        path = mismatch.path
        if path in self.tracker.since_pass:
            return True
        if mismatch.kind == "counter":  # a counter moves with its children
            root = self.rules.ledger_root_of(path)
            if root is not None:  # a ledger-id generator's next id: with any node of it, or their children
                return any(root in (self.rules.ledger_root_of(p), self.rules.ledger_root_of(store_paths.parent(p) or p))
                           for p in self.tracker.since_pass)  # fmt: skip
            return any(store_paths.parent(p) == path for p in self.tracker.since_pass)
        return False

    # ---- a full pass on Spark ------------------------------------------------------------------

    async def _full_pass(
        self, flag: MigrationFlag, stage: str, *, early_delta: bool = False
    ) -> tuple[CopyOutcome, str | None]:
        """The Spark copy with its verification, in a child process, watched while it runs:
        ``Abandoned`` when the flag moves or leadership goes; inside the freeze a change to
        the source ends it early with ``FreezeBroken``. With ``early_delta``, the first delta
        round runs beside the verification, once the copy's writes are done (the verification
        expects mismatches on the paths that changed: the round carries exactly those); then
        its failure comes second."""
        target_url = self._target_url(flag.target_url)
        runner: CopyRunner | StoreCopyRunner
        source, target = self.source_url.unredacted(), target_url.unredacted()
        if self.copy_engine == "store":
            runner = StoreCopyRunner(source, target, self.rules, lease=self._lease)
        else:
            runner = CopyRunner(source, target, self.spark_master, self.rules, lease=self._lease)
        log.info("%s: copying %s -> %s", stage, self.source_url, target_url)
        copied = asyncio.Event()
        stages: set[str] = set()

        def on_progress(s: str, d: int, t: int) -> None:
            if "copying" in stages and s != "copying":
                copied.set()  # the job lists and verifies now: no copy write is left in flight
            stages.add(s)
            self._report(flag, f"{stage}: {s}", d, t)

        copying = asyncio.get_running_loop().create_task(runner.run(on_progress))
        early: asyncio.Task[tuple[int | None, str | None]] | None = None
        try:
            while not copying.done():
                await asyncio.wait([copying], timeout=POLL_SECONDS)
                if copying.done():
                    break
                await self._still_leader()
                current = await read_flag(self.source)
                if current is None or current.version != flag.version:
                    raise Abandoned()
                if flag.phase.frozen and (why := await self.tracker.violation()) is not None:
                    raise FreezeBroken(why)
                if (why := await self._members_joined(flag)) is not None:
                    raise MembersJoined(why)
                # a copy may hang on a store that stopped answering rather than fail: look for it
                bound = self.freeze_outage_timeout if flag.phase.frozen else self.outage_timeout
                if (why := await self.reachability.probe(flag.target_url)) is not None:
                    if self.reachability.down_for > bound:
                        raise Unreachable(f"{why} while the copy ran")
                if early_delta and early is None and copied.is_set() and not flag.phase.frozen:
                    early = asyncio.get_running_loop().create_task(self._delta_round(flag))
            outcome = copying.result()
            if outcome.kind == "LeaseExpired":
                raise Abandoned()  # this coordinator was paused or cut off: is it still the leader?
            if outcome.report is not None:
                merge_into(self.counters, outcome.report.counters)
            return outcome, (await early)[1] if early is not None else None
        finally:
            if not copying.done():
                runner.kill()
                with contextlib.suppress(BaseException):
                    await copying
            if early is not None and not early.done():
                # its writes are fenced by the leader lease; let them end before the driver
                # decides (a cleanup of the target must not race a carry)
                with contextlib.suppress(BaseException):
                    await early

    # ---- progress ------------------------------------------------------------------------------

    def _report(self, flag: MigrationFlag, stage: str, done: int, total: int, *, verified: bool = False,
                force: bool = False) -> None:
        self._progress.report(lambda: {
            "epoch": flag.epoch, "stage": stage, "done": done, "total": total, "verified": verified,
            "passes": self.passes, "pending": len(self.tracker.pending), "updatedAt": now_ms(),
            "counters": counters_shown(self.counters), "counters_total": len(self.counters),
            "timings": self.timings[-TIMINGS_SHOWN:],
        }, force=force)

    def _timed(self, kind: str, seconds: float, *, paths: int | None = None,
               report: CopyReport | None = None, at: int | None = None) -> None:
        timing = pass_timing(kind, self.passes, seconds, paths=paths, report=report)
        self.timings.insert(len(self.timings) if at is None else at, timing)

    async def flush_progress(self) -> None:
        """The progress last reported, written before the flag's next phase is (bounded: a source
        that does not answer costs the freeze at most ``PROGRESS_FLUSH_S``)."""
        await self._progress.flush(PROGRESS_FLUSH_S)

    @property
    def progress(self) -> dict[str, object]:
        """The progress last written (``migrate status`` reads it from the source)."""
        return self._progress.shown


def _under(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies below one (a conflict carried whole)."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)
