"""The coordinator's phase machine. It runs in the agent elected leader and sees only the
source store, a way to open the target, and the copy passes.

Each phase is resumed from the flag, so a new leader picks up where a dead one stopped:
- SYNCING: the online pre-copy while writes flow (``passes.Passes.sync``) → PREPARATION.
- PREPARATION: wait for every live participant's acknowledgement of the epoch; all in →
  COPYING; ``prepare_timeout`` since the phase began → FAILED, naming who did not acknowledge.
- COPYING: the last delta, checked, the source held frozen (``Passes.final``) → COMPLETED.
  A leader that did not follow the source since the last full pass (a failover inside the
  freeze, a broken change stream) cannot trust the delta: FAILED, never an incomplete copy.
- FAILED: remove what the migration put into the target, then mark the flag ``targetCleaned``.

Every move is a compare-and-set on the flag as read; a leader that finds the flag moved under it
reads it again, and one that lost its leader node stops acting.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from metashift.migration import paths
from metashift.migration.flag import FlagChanged, MigrationFlag, move, read_flag, write_flag
from metashift.migration.participants import list_participants
from metashift.migration.phase import Phase
from metashift.spark.rules import Rules
from metashift.stores import MetadataStoreError, Notification, Store, StoreURL, parse_url

from .change_tracker import ChangeTracker
from .cleanup import empty_target
from .election import LeaderElection
from .passes import Abandoned, Passes

log = logging.getLogger(__name__)

TargetOpener = Callable[[str], Awaitable[Store]]
#: How often the leader looks again when no notification came.
POLL_SECONDS = 0.5
#: Paths in the last delta from which the freeze runs a Spark pass instead of the store layer.
SPARK_DELTA_THRESHOLD = 10_000


class Deposed(Exception):
    """This agent no longer holds the leader node."""


class Coordinator:
    """Stands for election and, while leader, drives every migration recorded in the flag."""

    def __init__(
        self,
        source: Store,
        *,
        node_id: str,
        source_url: StoreURL,
        open_target: TargetOpener,
        target_credentials: tuple[str | None, str | None] = (None, None),
        prepare_timeout: float = 60.0,
        spark_master: str | None = None,
        spark_delta_threshold: int = SPARK_DELTA_THRESHOLD,
        rules: Rules | None = None,
    ) -> None:
        self.source = source
        self.node_id = node_id
        self._open_target = open_target
        self._target_credentials = target_credentials
        self.prepare_timeout = prepare_timeout
        self.election = LeaderElection(source, node_id)
        self.tracker = ChangeTracker(source)
        self.passes = Passes(
            source, self.tracker, source_url=source_url, target_url=self._target_url, open_target=open_target,
            still_leader=self._check_leader, spark_master=spark_master, spark_delta_threshold=spark_delta_threshold,
            rules=rules or Rules(),
        )
        self.leading = False
        self._changed = asyncio.Event()

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
                    self.tracker.stop()
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
                    self.tracker.stop()
                    await self._wait_change()
                elif flag.phase is Phase.SYNCING:
                    await self._sync(flag)
                elif flag.phase is Phase.PREPARATION:
                    await self._await_acknowledgements(flag)
                elif flag.phase is Phase.COPYING:
                    await self._finish(flag)
                elif flag.phase is Phase.FAILED:
                    self.tracker.stop()
                    await self._clean(flag)
            except FlagChanged:
                log.info("the flag moved under the coordinator; reading it again")
            except Abandoned:
                log.info("the flag moved while copying; reading it again")

    async def _sync(self, flag: MigrationFlag) -> None:
        result = await self.passes.sync(flag)
        if result.failure is not None:
            await self._fail(flag, result.failure)
            return
        await move(self.source, flag, Phase.PREPARATION, coordinator=self.node_id)
        log.info("pre-copy done in %d full pass(es): freezing", result.passes)

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
                await move(self.source, flag, Phase.COPYING, coordinator=self.node_id)
                log.info("every participant (%d) acknowledged epoch %d: copying", len(participants), flag.epoch)
                return
            if time.time() > deadline:
                names = ", ".join(sorted(p.node_id for p in waiting))
                await self._fail(flag, f"not acknowledged within {self.prepare_timeout:g}s by: {names}")
                return
            await self._wait_change(min(POLL_SECONDS, max(0.05, deadline - time.time())))

    async def _finish(self, flag: MigrationFlag) -> None:
        result = await self.passes.final(flag)
        await self._check_leader()
        if result.failure is not None:
            await self._fail(flag, result.failure)
            return
        await move(self.source, flag, Phase.COMPLETED, coordinator=self.node_id)
        self.tracker.stop()
        log.info("migration epoch %d completed", flag.epoch)

    async def _fail(self, flag: MigrationFlag, reason: str) -> None:
        log.warning("migration epoch %d fails: %s", flag.epoch, reason)
        await move(self.source, flag, Phase.FAILED, coordinator=self.node_id, reason=reason)
        self.tracker.stop()

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

    def _target_url(self, public: str) -> StoreURL:
        url = parse_url(public)
        username, password = self._target_credentials
        if username is not None:
            url = dataclasses.replace(url, username=username, password=password)
        return url
