"""The coordinator's phase machine, for one home store. It runs in the agent elected leader and
sees only the home store (the migration's source), a way to open the target, and the copy passes.

Each phase is resumed from the flag, so a new leader picks up where a dead one stopped:
- SYNCING: the online pre-copy while writes flow (``passes.Passes.sync``) → PREPARATION.
- PREPARATION: wait for every live participant's acknowledgement of the epoch (``freeze``); all
  in → COPYING, naming the dead ones dropped; ``prepare_timeout`` since the phase began, or the
  target silent for ``participant_timeout`` → FAILED.
- COPYING: the last delta, checked, the source held frozen (``Passes.final``), the origin record
  written into the target → COMPLETED. A leader that took over inside the freeze knows what
  changed since the leader last carried (standbys follow the changes from the first round of
  SYNCING on: ``ChangeTracker``); one that does not (it started late) makes the last pass a full
  one; one whose change stream broke cannot trust a delta: FAILED, never an incomplete copy. A
  store silent for ``participant_timeout`` → FAILED.
- COMPLETED, not yet released: the COMPLETED write is where the cluster switches, so what a
  writer bypassing the agents wrote into the source between the last check and that write is
  carried and checked now, while the agents still hold every write (``Passes.settle``); then the
  flag is released and the agents go to the target. The outcome no longer changes: a store that
  does not answer is waited for.
- FAILED: remove what the migration put into the target, then mark the flag ``targetCleaned``.

While leading in a store a migration brought the cluster into, it also follows the store the
cluster came from, for what a member still writes there (``after_switch.Follower``).

Every move is a compare-and-set on the flag as read; a leader that finds the flag moved under it
reads it again, and one that lost its leader node (its heartbeat stopped, another took over)
stops acting.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from metashift.copy.rules import Rules
from metashift.migration import paths
from metashift.migration.flag import FlagChanged, MigrationFlag, move, read_flag, release, write_flag
from metashift.migration.liveness import BEATS_PER_TIMEOUT
from metashift.migration.origin import read_state, write_origin
from metashift.migration.phase import Phase
from metashift.migration.settings import CoordinatorSettings
from metashift.stores import MetadataStoreError, Notification, Store, StoreUnavailable, StoreURL, open_store
from metashift.stores.aio import wait_event

from .after_switch import Follower
from .change_tracker import ChangeTracker
from .cleanup import empty_target
from .election import LeaderElection
from .freeze import ParticipantWatch, deadline_passed
from .passes import Abandoned, Passes, PassResult, Unreachable

log = logging.getLogger(__name__)

TargetOpener = Callable[[str], Awaitable[Store]]
#: How often the leader looks again when no notification came.
POLL_SECONDS = 0.5
#: Shortest pause between two looks at the acknowledgements (each heartbeat is a notification).
MIN_WAIT_SECONDS = 0.05


class Deposed(Exception):
    """This agent no longer holds the leader node."""


class Coordinator:
    """Stands for election in one store and, while leader, drives every migration its flag records."""

    def __init__(
        self,
        source: Store,
        *,
        node_id: str,
        open_target: TargetOpener,
        url_for: Callable[[str], StoreURL],
        settings: CoordinatorSettings,
        rules: Rules | None = None,
    ) -> None:
        self.source = source
        self.node_id = node_id
        self._open_target = open_target
        self.prepare_timeout = settings.prepare_timeout
        self.participant_timeout = participant_timeout = settings.participant_timeout
        self.election = LeaderElection(source, node_id, participant_timeout)
        self.tracker = ChangeTracker(source)
        self.participants = ParticipantWatch(source)
        self.passes = Passes(
            source, self.tracker, source_url=source.url, target_url=url_for, open_target=open_target,
            still_leader=self._check_leader, leader_fence=self._fence,
            leader_lease=lambda: self.election.lease_until, spark_master=settings.spark_master,
            copy_engine=settings.copy_engine,
            spark_delta_threshold=settings.spark_delta_threshold,
            outage_timeout=settings.outage_timeout, freeze_outage_timeout=participant_timeout,
            rules=rules or Rules(),
        )
        self.after_switch = Follower(source, lambda url: open_store(url_for(url), create_root=False), node_id)
        """The store the cluster came from, followed while leading."""
        self.leading = False
        self._deposed = False
        self._changed = asyncio.Event()
        self._switched: tuple[int, int | None] = (0, None)
        """(epoch, the source's position at its COMPLETED write), as this coordinator made it."""

    # ---- life cycle -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the changes and the heartbeats; campaign, lead until deposed, campaign again;
        until cancelled."""
        remove = self.source.add_listener(self._on_notification, under=paths.ROOT)
        self.tracker.follow()
        observer = asyncio.get_running_loop().create_task(self._observe(), name="participant-watch")
        try:
            while True:
                await self.election.campaign()
                self.leading, self._deposed = True, False
                beating = asyncio.get_running_loop().create_task(self._beat(), name="leader-heartbeat")
                following = asyncio.get_running_loop().create_task(self.after_switch.run(), name="after-switch")
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
                    beating.cancel()
                    following.cancel()
                    self.tracker.follow()  # a standby again: ready to take over inside a freeze
        finally:
            remove()
            observer.cancel()
            self.tracker.stop()
            with contextlib.suppress(Exception):
                await asyncio.shield(self.election.resign())
            with contextlib.suppress(Exception):
                await asyncio.shield(self.passes.reachability.close())

    async def _observe(self) -> None:
        """Note the participants' heartbeats all along, so that a new leader knows who died; and
        once no migration is in progress, stop following the whole source (``ChangeTracker``)."""
        while True:
            with contextlib.suppress(MetadataStoreError):
                await self.participants.observe()
                generation = self.tracker.generation
                flag = await read_flag(self.source)
                if flag is None or not (flag.phase.in_progress or flag.holds_writes):
                    self.tracker.idle(generation)
            await asyncio.sleep(self.participant_timeout / BEATS_PER_TIMEOUT)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.participant_timeout / BEATS_PER_TIMEOUT)
            try:
                if not await self.election.beat():
                    log.warning("the leader node is no longer ours: another coordinator took over")
                    self._deposed = True
                    self._changed.set()
                    return
            except MetadataStoreError as e:
                log.warning("coordinator heartbeat failed: %s", e)

    def _on_notification(self, n: Notification) -> None:
        if n.path == paths.FLAG or n.path.startswith(paths.PARTICIPANTS) or n.path == paths.LEADER:
            self._changed.set()

    async def _wait_change(self, at_most: float = POLL_SECONDS) -> None:
        await wait_event(self._changed, at_most)
        self._changed.clear()

    async def _check_leader(self) -> None:
        if self._deposed:
            raise Deposed()
        try:
            holds = await self.election.holds()
        except StoreUnavailable:
            if self.election.fresh():
                # the store's member went (a leader's loss): the lease is still ours, and every
                # write into the target is fenced by it (``_fence``); look again next round rather
                # than resign, which hands the freeze to a standby that must make a full last pass
                return
            raise
        if not holds:
            raise Deposed()

    def _fence(self) -> None:
        """Before each write into the target: a leader whose lease ran out (paused, cut off) is
        deposed for all it knows; it writes nothing more and stands for election again."""
        if self._deposed or not self.election.fresh():
            self._deposed = True
            self._changed.set()
            raise Deposed("the leader lease ran out: not writing into the target")

    # ---- leading --------------------------------------------------------------------------------

    async def _lead(self) -> None:
        flag = await read_flag(self.source)
        if flag is not None and (flag.phase.in_progress or flag.holds_writes) and flag.coordinator != self.node_id:
            # fence: from this write on, a deposed leader's compare-and-set can only fail
            flag = await write_flag(self.source, dataclasses.replace(flag, coordinator=self.node_id), flag.version)
            log.info("taking over the migration (epoch %d) in %s", flag.epoch, flag.phase.value)
        while True:
            await self._check_leader()
            state = await read_state(self.source)
            flag = state.current_flag
            try:
                if flag is not None and flag.phase is Phase.COMPLETED and not flag.released:
                    await self._release(flag)
                elif flag is None or flag.phase is Phase.COMPLETED or (
                    flag.phase is Phase.FAILED and flag.target_cleaned
                ):
                    await self._wait_change()
                elif flag.phase is Phase.SYNCING:
                    await self._sync(flag)
                elif flag.phase is Phase.PREPARATION:
                    await self._await_acknowledgements(flag)
                elif flag.phase is Phase.COPYING:
                    await self._finish(flag)
                elif flag.phase is Phase.FAILED:
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
        reach = self.passes.reachability
        while True:
            await self._check_leader()
            current = await read_flag(self.source)
            if current is None or current.version != flag.version:
                return  # moved (abort, a start): dispatch again
            acks = await self.participants.acknowledgements(flag.epoch)
            if acks.complete:
                dropped = tuple(sorted(p.node_id for p in acks.dropped))
                await move(self.source, flag, Phase.COPYING, coordinator=self.node_id, dropped=dropped)
                log.info("every live participant (%d) acknowledged epoch %d%s: copying", len(acks.acknowledged),
                         flag.epoch, f" (dead, not waited for: {', '.join(dropped)})" if dropped else "")
                return
            why = await reach.probe(flag.target_url)
            if why is not None and reach.down_for > self.participant_timeout:
                await self._fail(flag, f"{why} for more than {self.participant_timeout:g}s inside the freeze "
                                       "(coordinator.participant_timeout)")
                return
            if deadline_passed(flag.phase_since, self.prepare_timeout):
                names = ", ".join(sorted(p.node_id for p in acks.waiting))
                await self._fail(flag, f"not acknowledged within {self.prepare_timeout:g}s by: {names}")
                return
            await self._wait_change(POLL_SECONDS)
            await asyncio.sleep(MIN_WAIT_SECONDS)

    async def _finish(self, flag: MigrationFlag) -> None:
        """COPYING: the last delta; a store that stops answering is given ``participant_timeout``
        (every write of the cluster waits meanwhile), then the migration fails."""
        silent_since: float | None = None
        while True:
            began = time.monotonic()
            try:
                result = await self.passes.final(flag)
                if result.failure is None:
                    target = await self._open_target(flag.target_url)
                    try:  # where the cluster comes from: the next migration from there takes a higher epoch
                        await write_origin(target, flag.epoch, self.source.url.public())
                    finally:
                        with contextlib.suppress(Exception):
                            await target.close()
                break
            except (StoreUnavailable, Unreachable) as e:
                # silent from when the attempt that failed began: its calls waited as long as the
                # store took to refuse them, and every write of the cluster waited with them
                silent_since = silent_since or began
                if time.monotonic() - silent_since > self.participant_timeout:
                    result = PassResult(f"a store did not answer for more than {self.participant_timeout:g}s inside "
                                        f"the freeze (coordinator.participant_timeout): {e}")
                    break
                log.warning("COPYING: %s; trying again", e)
                await asyncio.sleep(POLL_SECONDS)
                await self._check_leader()
                current = await read_flag(self.source)
                if current is None or current.version != flag.version:
                    return
        await self._check_leader()
        if result.failure is None and self.tracker.broken is not None:
            # the stream broke after the last check (a ZooKeeper leader lost just then): a write that
            # bypassed the agents since could only be found by a full pass with every write held
            # (``settle``), as long as the tree takes to copy; failing releases them at once
            result = PassResult(f"the delta cannot be trusted inside the freeze: {self.tracker.broken} "
                                "(after the last check, before COMPLETED)", result.passes)
        await self.passes.flush_progress()  # ``status`` shows the verification once the phase is read
        if result.failure is not None:
            await self._fail(flag, result.failure)
            return
        # not released yet: the agents hold every write until what changed just before is carried
        await move(self.source, flag, Phase.COMPLETED, coordinator=self.node_id, released=False)
        # where the source stood at the switch: what is written there after it is not the cluster's
        with contextlib.suppress(MetadataStoreError):
            self._switched = (flag.epoch, await self.source.position_of(paths.FLAG))
        log.info("migration epoch %d completed", flag.epoch)

    async def _release(self, flag: MigrationFlag) -> None:
        """COMPLETED, writes still held: carry what the source got before the COMPLETED write and
        after the last check (``Passes.settle``), then release the agents to the target."""
        while True:
            try:
                failure = await self.passes.settle(flag)
                break
            except (StoreUnavailable, Unreachable, TimeoutError) as e:
                # the outcome is decided: only waiting is left
                log.warning("COMPLETED, not released yet: %s; trying again", e)
                await asyncio.sleep(POLL_SECONDS)
                await self._check_leader()
        if failure is not None:
            log.error("migration epoch %d: after COMPLETED, %s", flag.epoch, failure)
        epoch, position = self._switched
        if epoch != flag.epoch or position is None:
            # taken over after the COMPLETED write: the flag's last write is the nearest known
            position = await self.source.position_of(paths.FLAG)
        await self._check_leader()
        await release(self.source, flag, reason=failure, switch_position=position)
        log.info("migration epoch %d released: the agents serve from the target", flag.epoch)

    async def _fail(self, flag: MigrationFlag, reason: str) -> None:
        log.warning("migration epoch %d fails: %s", flag.epoch, reason)
        await move(self.source, flag, Phase.FAILED, coordinator=self.node_id, reason=reason)

    async def _clean(self, flag: MigrationFlag) -> None:
        try:
            target = await self._open_target(flag.target_url)
        except MetadataStoreError as e:
            log.warning("cannot reach the target to remove the copy (%s); trying again", e)
            await self._wait_change(5.0)
            return
        try:
            await empty_target(target, self._fence)
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
