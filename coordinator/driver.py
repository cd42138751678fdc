"""The coordinator's phase machine. It runs in the agent elected leader and sees only the
source store, a way to open the target, and the copy runner.

Each phase is resumed from the flag, so a new leader picks up where a dead one stopped:
- PREPARATION: wait for every live participant's acknowledgement of the epoch; all in → COPYING
  (the watch on the frozen source starts first); ``prepare_timeout`` since the phase began →
  FAILED, naming who did not acknowledge.
- COPYING: the Spark copy with its verification, in a child process, while the frozen source is
  watched; copy and verification passed and nothing changed → COMPLETED, else FAILED with why.
- FAILED: remove what the migration put into the target, then mark the flag ``targetCleaned``.

Every move is a compare-and-set on the flag as read; a leader that finds the flag moved under it
reads it again, and one that lost its leader node stops acting.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable

from metashift.migration import paths
from metashift.migration.flag import FlagChanged, MigrationFlag, move, now_ms, read_flag, write_flag
from metashift.migration.participants import list_participants
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, MetadataStoreError, Notification, StoreURL, parse_url

from .cleanup import empty_target
from .copy_runner import CopyOutcome, CopyRunner
from .election import LeaderElection
from .freeze_watch import FreezeWatch

log = logging.getLogger(__name__)

TargetOpener = Callable[[str], Awaitable[MetadataStore]]
#: How often the leader looks again when no notification came.
POLL_SECONDS = 0.5
#: Least time between two progress writes.
PROGRESS_EVERY = 1.0


class Deposed(Exception):
    """This agent no longer holds the leader node."""


class Coordinator:
    """Stands for election and, while leader, drives every migration recorded in the flag."""

    def __init__(
        self,
        source: MetadataStore,
        *,
        node_id: str,
        source_url: StoreURL,
        open_target: TargetOpener,
        target_credentials: tuple[str | None, str | None] = (None, None),
        prepare_timeout: float = 60.0,
        spark_master: str | None = None,
    ) -> None:
        self.source = source
        self.node_id = node_id
        self.source_url = source_url
        self._open_target = open_target
        self._target_credentials = target_credentials
        self.prepare_timeout = prepare_timeout
        self.spark_master = spark_master
        self.election = LeaderElection(source, node_id)
        self.watch = FreezeWatch(source)
        self.leading = False
        self._changed = asyncio.Event()
        self._last_progress = 0.0

    # ---- life cycle -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead until deposed, campaign again; until cancelled."""
        remove = self.source.add_listener(self._on_notification)
        try:
            while True:
                await self.election.campaign()
                self.leading = True
                try:
                    await self._lead()
                except Deposed:
                    log.warning("no longer the coordinator")
                except MetadataStoreError as e:
                    log.warning("coordinator: %s; standing for election again", e)
                    await self.election.resign()
                    await asyncio.sleep(POLL_SECONDS)
                finally:
                    self.leading = False
                    self.watch.stop()
        finally:
            remove()
            with contextlib.suppress(Exception):
                await asyncio.shield(self.election.resign())

    def _on_notification(self, n: Notification) -> None:
        if n.path == paths.FLAG or n.path.startswith(paths.PARTICIPANTS) or n.path == paths.LEADER:
            self._changed.set()

    async def _wait_change(self, at_most: float = POLL_SECONDS) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), at_most)
        self._changed.clear()

    async def _check_leader(self) -> None:
        if not await self.election.holds():
            raise Deposed()

    # ---- leading --------------------------------------------------------------------------------

    async def _lead(self) -> None:
        flag = await read_flag(self.source)
        if flag is not None and flag.phase.in_progress and flag.coordinator != self.node_id:
            # fence: from this write on, a deposed leader's compare-and-set can only fail
            flag = await write_flag(self.source, dataclasses.replace(flag, coordinator=self.node_id), flag.version)
            log.info("taking over the migration (epoch %d) in %s", flag.epoch, flag.phase.value)
        while True:
            await self._check_leader()
            flag = await read_flag(self.source)
            try:
                if flag is None or flag.phase is Phase.COMPLETED or (
                    flag.phase is Phase.FAILED and flag.target_cleaned
                ):
                    self.watch.stop()
                    await self._wait_change()
                elif flag.phase is Phase.PREPARATION:
                    await self._await_acknowledgements(flag)
                elif flag.phase is Phase.COPYING:
                    await self._copy(flag)
                elif flag.phase is Phase.FAILED:
                    self.watch.stop()
                    await self._clean(flag)
            except FlagChanged:
                log.info("the flag moved under the coordinator; reading it again")

    async def _await_acknowledgements(self, flag: MigrationFlag) -> None:
        deadline = flag.phase_since / 1000.0 + self.prepare_timeout
        while True:
            await self._check_leader()
            current = await read_flag(self.source)
            if current is None or current.version != flag.version:
                return  # moved (abort, a start): dispatch again
            participants = await list_participants(self.source)
            waiting = [p for p in participants if p.acknowledged != flag.epoch]
            if not waiting:
                self.watch.start()  # from the last acknowledgement on, the source must not change
                await move(self.source, flag, Phase.COPYING, coordinator=self.node_id)
                log.info("every participant (%d) acknowledged epoch %d: copying", len(participants), flag.epoch)
                return
            if time.time() > deadline:
                names = ", ".join(sorted(p.node_id for p in waiting))
                reason = f"not acknowledged within {self.prepare_timeout:g}s by: {names}"
                await self._fail(flag, reason)
                return
            await self._wait_change(min(POLL_SECONDS, max(0.05, deadline - time.time())))

    async def _copy(self, flag: MigrationFlag) -> None:
        self.watch.start()  # a leader that resumes COPYING watches from now, then copies everything
        target_url = self._target_url(flag.target_url)
        runner = CopyRunner(self.source_url.unredacted(), target_url.unredacted(), self.spark_master)
        log.info("copying %s -> %s", self.source_url, target_url)
        copying = asyncio.get_running_loop().create_task(runner.run(lambda s, d, t: self._progress(flag, s, d, t)))
        try:
            while not copying.done():
                await asyncio.wait([copying], timeout=POLL_SECONDS)
                if copying.done():
                    break
                await self._check_leader()
                current = await read_flag(self.source)
                if current is None or current.version != flag.version:
                    return  # aborted or taken over: the finally stops the copy
                why = await self.watch.violation()
                if why is not None:
                    await self._fail(flag, why)
                    return
            outcome: CopyOutcome = copying.result()
        finally:
            if not copying.done():
                runner.kill()
                with contextlib.suppress(BaseException):
                    await copying
        await self._check_leader()
        if not outcome.ok:
            await self._fail(flag, outcome.failure())
            return
        target = await self._open_target(flag.target_url)
        try:
            why = await self.watch.violation(target)
        finally:
            await target.close()
        if why is not None:
            await self._fail(flag, why)
            return
        nodes = int(outcome.report.get("nodes", 0))
        await self._write_progress(flag, "verified", nodes, nodes, verified=True)
        await move(self.source, flag, Phase.COMPLETED, coordinator=self.node_id)
        self.watch.stop()
        log.info("migration epoch %d completed", flag.epoch)

    async def _fail(self, flag: MigrationFlag, reason: str) -> None:
        log.warning("migration epoch %d fails: %s", flag.epoch, reason)
        await move(self.source, flag, Phase.FAILED, coordinator=self.node_id, reason=reason)
        self.watch.stop()

    async def _clean(self, flag: MigrationFlag) -> None:
        try:
            target = await self._open_target(flag.target_url)
        except MetadataStoreError as e:
            log.warning("cannot reach the target to remove the copy (%s); trying again", e)
            await self._wait_change(5.0)
            return
        try:
            await empty_target(target)
        except MetadataStoreError as e:
            log.warning("removing the copy from the target failed (%s); trying again", e)
            await self._wait_change(5.0)
            return
        finally:
            with contextlib.suppress(Exception):
                await target.close()
        await self._check_leader()
        await write_flag(self.source, dataclasses.replace(flag, target_cleaned=True), flag.version)
        log.info("the target is clean again after the failed migration (epoch %d)", flag.epoch)

    # ---- helpers --------------------------------------------------------------------------------

    def _target_url(self, public: str) -> StoreURL:
        url = parse_url(public)
        username, password = self._target_credentials
        if username is not None:
            url = dataclasses.replace(url, username=username, password=password)
        return url

    def _progress(self, flag: MigrationFlag, stage: str, done: int, total: int) -> None:
        if time.monotonic() - self._last_progress < PROGRESS_EVERY:
            return
        self._last_progress = time.monotonic()
        asyncio.get_running_loop().create_task(self._write_progress(flag, stage, done, total))

    async def _write_progress(
        self, flag: MigrationFlag, stage: str, done: int, total: int, *, verified: bool = False
    ) -> None:
        body = {"epoch": flag.epoch, "stage": stage, "done": done, "total": total, "verified": verified,
                "updatedAt": now_ms()}
        with contextlib.suppress(MetadataStoreError):
            await self.source.put(paths.PROGRESS, json.dumps(body).encode())
