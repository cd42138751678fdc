"""The participant: what every agent does for a migration.

It registers the agent under ``participants/`` (a sequential ephemeral in the source), follows
the flag, and acts on each phase:

- SYNCING: nothing: writes flow while the coordinator copies.
- PREPARATION, COPYING: close the write gate and drain the writes in flight, open the target
  (the flag names it; credentials come from the agent's own ``[target]`` config), re-create there
  every ephemeral of its clients with the same value and version, then acknowledge the epoch by a
  compare-and-set of its own record. Reads keep going to the frozen source.
- COMPLETED: route reads, writes and watches to the target and release the held writes there.
- FAILED: drop the target (its session takes the re-created ephemerals with it), route to the
  source and release the held writes there.

An agent that starts, restarts or reconnects mid-migration reads the flag first and acts on it;
a lost store session (its registration went with it) registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from metashift.agent.gate import WriteGate
from metashift.agent.sessions import SessionRegistry
from metashift.migration import paths
from metashift.migration.flag import MigrationFlag, read_flag
from metashift.migration.participants import ParticipantRecord
from metashift.migration.phase import Phase
from metashift.stores import BadVersion, MetadataStore, MetadataStoreError, Notification, SessionEvent

log = logging.getLogger(__name__)

#: Opens the target store named by the flag's ``targetUrl`` with the agent's own credentials.
TargetOpener = Callable[[str], Awaitable[MetadataStore]]
#: Told of every phase this agent acts on (metrics, health).
PhaseListener = Callable[[Phase], None]

#: How often the flag is read again when no notification came (a missed one costs at most this).
POLL_SECONDS = 1.0


class Participant:
    """One agent's part in every migration: registration, the freeze, the switch, the rollback."""

    def __init__(
        self,
        *,
        gate: WriteGate,
        registry: SessionRegistry,
        open_target: TargetOpener,
        node_id: str,
        role: str,
        address: str,
        drain_timeout: float = 30.0,
        on_phase: PhaseListener | None = None,
    ) -> None:
        self.gate = gate
        self.router = gate.router
        self.source = gate.router.source
        self.registry = registry
        self._open_target = open_target
        self.record = ParticipantRecord(node_id, role, address)
        self.drain_timeout = drain_timeout
        self._on_phase = on_phase
        self.phase = Phase.NOT_STARTED
        self.epoch = 0
        self._prepared: int | None = None
        """The epoch whose freeze this agent has done (gate closed, ephemerals re-created)."""
        self._target: MetadataStore | None = None
        self._holding = False
        """This participant closed the gate for a migration and has not reopened it yet."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._removers: list[Callable[[], None]] = []
        self.errors = 0
        self.carried = 0
        """Ephemerals re-created in the target by the last freeze."""

    # ---- life cycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Act on the flag as it stands (before the agent serves anyone: a frozen migration closes
        the gate first, a completed one routes to the target), register, then follow the flag."""
        self._removers.append(self.source.add_listener(self._on_notification))
        self._removers.append(self.source.add_session_listener(self._on_session_event))
        flag = await read_flag(self.source)
        if flag is not None and flag.phase.frozen:
            await self._freeze()
        if flag is not None and flag.phase is Phase.COMPLETED:
            await self._complete(flag)  # a target that cannot be reached fails the start: no stale reads
        await self._register()
        self._task = asyncio.get_running_loop().create_task(self._follow(), name="participant")

    async def stop(self) -> None:
        for remove in self._removers:
            remove()
        self._removers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        target, self._target = self._target, None
        if target is not None and target is not self.router.active:
            with contextlib.suppress(Exception):
                await target.close()

    @property
    def target(self) -> MetadataStore | None:
        return self._target

    # ---- following the flag ----------------------------------------------------------------------

    def _on_notification(self, notification: Notification) -> None:
        if notification.path == paths.FLAG or notification.path == self.record.path:
            self._wake.set()

    def _on_session_event(self, event: SessionEvent) -> None:
        if event in (SessionEvent.SESSION_REESTABLISHED, SessionEvent.RECONNECTED):
            self._wake.set()

    async def _follow(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
            self._wake.clear()
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except MetadataStoreError as e:
                self.errors += 1
                log.warning("participant: %s; trying again", e)
            except Exception:
                self.errors += 1
                log.exception("participant: unexpected failure; trying again")

    async def step(self) -> None:
        """Read the flag once and do what it asks of this agent."""
        flag = await read_flag(self.source)
        await self._register()
        if flag is None:
            if self._holding:
                await self._roll_back("the migration flag was removed")
            self._seen(Phase.NOT_STARTED, 0)
            return
        self._seen(flag.phase, flag.epoch)
        if flag.phase is Phase.SYNCING:
            if self._holding or self._target is not None:  # a freeze of an older epoch never ended here
                await self._roll_back("a new migration started")
        elif flag.phase.frozen:
            await self._prepare(flag)
        elif flag.phase is Phase.COMPLETED:
            await self._complete(flag)
        elif flag.phase is Phase.FAILED:
            if self._holding or self._target is not None:
                await self._roll_back(flag.reason or "failed")

    def _seen(self, phase: Phase, epoch: int) -> None:
        if (phase, epoch) != (self.phase, self.epoch):
            log.info("migration phase %s (epoch %d)", phase.value, epoch)
            self.phase, self.epoch = phase, epoch
            if self._on_phase is not None:
                self._on_phase(phase)

    # ---- registration ----------------------------------------------------------------------------

    async def _register(self) -> None:
        """Make sure this agent's record exists (a lost session took it): create it again if not."""
        if self.record.path:
            got = await self.source.get(self.record.path)
            if got is not None and got[1].created_by_self:
                return
            log.info("participant record %s is gone; registering again", self.record.path)
        fresh = dataclasses.replace(self.record, acknowledged=None, path="", version=-1)
        stat = await self.source.put(paths.PARTICIPANT_PREFIX, fresh.to_json(), ephemeral=True, sequential=True)
        self.record = dataclasses.replace(fresh, path=stat.path, version=stat.version)
        log.info("registered as participant %s", stat.path)

    async def _acknowledge(self, epoch: int) -> None:
        if self.record.acknowledged == epoch:
            return
        acked = self.record.acknowledging(epoch)
        try:
            stat = await self.source.put(self.record.path, acked.to_json(), expected_version=self.record.version)
        except BadVersion:  # changed behind our back (re-registered?): read it again next round
            got = await self.source.get(self.record.path)
            if got is not None:
                self.record = dataclasses.replace(self.record, version=got[1].version)
            raise
        self.record = dataclasses.replace(acked, version=stat.version)
        log.info("acknowledged migration epoch %d", epoch)

    # ---- the phases ------------------------------------------------------------------------------

    async def _prepare(self, flag: MigrationFlag) -> None:
        if self._prepared != flag.epoch:
            if self._prepared is not None:  # a freeze of an older epoch never ended here
                await self._roll_back("a new migration started")
            await self._freeze()
            if self._target is None:
                self._target = await self._open_target(flag.target_url)
            carried = await self.registry.recreate_in(self._target)
            self._prepared = flag.epoch
            self.carried = carried
        await self._acknowledge(flag.epoch)

    async def _freeze(self) -> None:
        """Close the gate (held writes wait) and drain the writes in flight."""
        self._holding = True
        await self.gate.close(self.drain_timeout)

    async def _complete(self, flag: MigrationFlag) -> None:
        if self._target is not None and self.router.active is self._target and self.gate.is_open:
            return
        if self._prepared != flag.epoch:
            # started (or restarted) after the freeze: nothing of ours is in the target yet
            await self._freeze()
            if self._target is None:
                self._target = await self._open_target(flag.target_url)
            await self.registry.recreate_in(self._target)
            self._prepared = flag.epoch
        assert self._target is not None
        left_behind = self.registry.ephemerals()
        await self.gate.open(towards=self._target)
        self._holding = False
        log.info("migration completed: serving from the target %s", self._target.url)
        # the copies in the source are ours (our source session's); nobody reads the source now
        for path in left_behind:
            with contextlib.suppress(MetadataStoreError):
                got = await self.source.get(path)
                if got is not None and got[1].created_by_self:
                    await self.source.delete(path, expected_version=got[1].version)

    async def _roll_back(self, reason: str) -> None:
        log.info("migration rolled back (%s): serving from the source", reason)
        target, self._target = self._target, None
        self._prepared = None
        if self.router.active is not self.source:
            # COMPLETED is final: only a flag removed by hand gets here; never leave the target then
            log.error("not routing back to the source: this agent already serves from the target")
            self._target = target
            return
        await self.gate.open(towards=self.source)
        self._holding = False
        if target is not None:
            # closing the target session deletes every ephemeral re-created there
            with contextlib.suppress(Exception):
                await target.close()
