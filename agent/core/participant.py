"""The participant: what every agent does for a migration.

It registers the agent under ``participants/`` in its home store (the store its cluster lives on;
``home.Home``), beats there (``registration``), follows the flag there, and acts on each phase:

- SYNCING: nothing: writes flow while the coordinator copies.
- PREPARATION, COPYING: close the write gate and drain the writes in flight, open the target
  (the flag names it; credentials come from the agent's own config), re-create there every
  ephemeral of its clients with the same value and version, then acknowledge the epoch by a
  compare-and-set of its own record. Reads wait too (``WriteGate.readable``): the frozen source
  would answer stale once another agent released its writes into the target.
- COMPLETED, once released (``released`` is false while the coordinator carries what changed in
  the source just before its COMPLETED write; writes stay held meanwhile): the target becomes the
  home: register and beat there, leave the old home, raise floors above the sequential names of
  the ephemerals it carried where the target's own counter is below them (``sequence_floors``),
  then route reads, writes and watches to the target and release the held writes there. A new
  migration from there (the way back) finds the agent registered and following its flag.
- FAILED: drop the target (its session takes the re-created ephemerals with it), route to the
  source and release the held writes there.

An agent that starts, restarts or reconnects mid-migration reads the flag first and acts on it,
following COMPLETED flags from its configured source to where the cluster lives now; a lost
store session (its registration went with it) registers again. When its heartbeat lease lapses
(no heartbeat got through for most of ``participant_timeout``) it holds writes and reads until a
heartbeat gets through again and it has read the flag again: the coordinator may have gone on
without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from metashift.agent.core.dry_open import CheckAnswerer
from metashift.agent.core.gate import WriteGate
from metashift.agent.core.home import Home
from metashift.agent.core.participant_states import LEASE_OK, LEASE_OUT, FreezeState, LeaseState, check_move
from metashift.agent.core.registration import Registration
from metashift.agent.core.sequence_floors import floor_carried_sequentials
from metashift.agent.core.sessions import SessionRegistry
from metashift.migration import paths
from metashift.migration.flag import MigrationFlag
from metashift.migration.liveness import BEATS_PER_TIMEOUT
from metashift.migration.origin import StoreState, read_state
from metashift.migration.participants import ParticipantRecord, list_participants
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, MetadataStoreError, Notification, SessionEvent
from metashift.stores.aio import cancel_and_wait, wait_event

log = logging.getLogger(__name__)

#: Opens the target store named by the flag's ``targetUrl`` with the agent's own credentials.
TargetOpener = Callable[[str], Awaitable[MetadataStore]]
#: Told of every phase this agent acts on (metrics, health).
PhaseListener = Callable[[Phase], None]

#: How often the flag is read again when no notification came (a missed one costs at most this).
POLL_SECONDS = 1.0
#: COMPLETED flags followed at most from the configured source to the store the cluster lives on.
MAX_HOPS = 16
#: Longest wait (seconds; at least 6 participant timeouts) for the other agents to leave a home
#: this agent left, before it deletes its members' ephemerals there.
OLD_HOME_WAIT = 30.0


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
        drain_timeout: float,
        participant_timeout: float,
        home: Home | None = None,
        on_phase: PhaseListener | None = None,
        agent_version: str = "",
        carried_counter: Callable[[str], bool] | None = None,
        hold_until_sessions: bool = False,
    ) -> None:
        self.gate = gate
        self.router = gate.router
        self.source = gate.router.source
        """The configured source (the first home)."""
        self.home = home if home is not None else Home(self.source)
        self.registry = registry
        self._open_target = open_target
        self.participant_timeout = participant_timeout
        self.registration = Registration(
            self.home.store, ParticipantRecord(node_id, role, address, agent_version=agent_version),
            participant_timeout,
        )
        self.checks = CheckAnswerer(open_target, lambda: self.registration)
        """Answers ``migrate check``'s dry opens of a target."""
        self.drain_timeout = drain_timeout
        self._carried_counter = carried_counter
        """Parents whose counter the copy carries (no floor in the freeze: ``sequence_floors``)."""
        self._on_phase = on_phase
        self.phase = Phase.NOT_STARTED
        self.epoch = 0
        self.freeze_state = FreezeState.FOLLOWING
        """Where this agent stands in a freeze (``participant_states``: moved by ``_move`` only)."""
        self._freeze_epoch: int | None = None
        """The epoch of the freeze this agent holds (FROZEN) or has done (PREPARED)."""
        self._target: MetadataStore | None = None
        """The target of the migration in progress (opened at its freeze)."""
        self._arrived: MetadataStore | None = None
        """The target of the last migration that completed (the home since)."""
        self.lease_state = LeaseState.HELD
        """Where this agent stands with its heartbeat lease (moved by ``_lease_to`` only)."""
        self._lapsed_at = 0.0
        """When the lease last lapsed (monotonic): a heartbeat after it renews it."""
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._removers: list[Callable[[], None]] = []
        self._lease_timer: asyncio.TimerHandle | None = None
        self._started_at = time.monotonic()
        self._clearing: set[asyncio.Task[None]] = set()
        """The clean-ups of homes left behind (``_clear_old_home``)."""
        self._sessions_ready = asyncio.Event()
        """Set once the sessions a predecessor process left are taken over (``sessions_ready``):
        until then a freeze re-creates nothing (it would miss them)."""
        if not hold_until_sessions:
            self._sessions_ready.set()
        self.state: StoreState | None = None
        """The home store's flag and origin as last read."""
        self.errors = 0
        self.carried = 0
        """Ephemerals re-created in the target by the last freeze."""

    @property
    def record(self) -> ParticipantRecord:
        return self.registration.record

    @property
    def heartbeat_age(self) -> float:
        """Seconds since the last heartbeat that got through (since the start when none has)."""
        return max(0.0, time.monotonic() - (self.registration.renewed_at or self._started_at))

    def describe(self) -> str:
        """Where the migration of this agent's cluster stands, in a few words (as last read)."""
        state = self.state
        flag = state.current_flag if state is not None else None
        if flag is not None and (flag.phase.in_progress or flag.holds_writes):
            return f"migration epoch {flag.epoch} in {flag.phase.value} to {flag.target_url}"
        if flag is not None and flag.phase is Phase.FAILED:
            return f"migration epoch {flag.epoch} FAILED ({flag.reason or 'no reason given'}); none in progress"
        if state is not None and state.origin is not None:
            return (f"no migration in progress; the cluster arrived here from {state.origin.source_url} "
                    f"(epoch {state.origin.epoch})")
        return "no migration in progress"

    # ---- life cycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Act on the flag as it stands before the agent serves anyone (a frozen migration closes
        the gate first; a completed one routes to its target, and the flag there is read next),
        register, then follow the flag and beat."""
        self.gate.fence_with(self.lease_ok, self._on_lapse)
        self._listen()
        for _ in range(MAX_HOPS):
            state = self.state = await read_state(self.home.store)
            if state.released_to is None:
                break
            assert state.flag is not None
            # the cluster left this store: go where it went (a target that cannot be reached
            # fails the start: no stale reads), then look at that store's flag
            await self._complete(state.flag, starting=True)
        else:
            raise MetadataStoreError(f"more than {MAX_HOPS} completed migrations to follow from {self.source.url}")
        flag = state.current_flag
        if flag is not None and flag.holds_writes:
            await self._freeze(flag.epoch)
        await self.registration.ensure()
        self._arm_lease_timer()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow(), name="participant"),
                       loop.create_task(self._beat(), name="heartbeat")]
        self.checks.start()

    async def stop(self, *, detach: bool = False) -> None:
        """Stop following the flag and beating; close the targets this agent opened (``detach``:
        leave their sessions for the next agent process, ``handover``)."""
        self._unlisten()
        await self.checks.stop()
        if self._lease_timer is not None:
            self._lease_timer.cancel()
        await cancel_and_wait([*self._tasks, *self._clearing], "participant")
        for store in {id(s): s for s in (self._target, self._arrived) if s is not None}.values():
            if store is not self.router.active and store is not self.source:
                with contextlib.suppress(Exception):
                    await (store.detach() if detach else store.close())
        self._target = None

    @property
    def target(self) -> MetadataStore | None:
        """The target of the migration in progress, or else of the last one completed."""
        return self._target if self._target is not None else self._arrived

    def _listen(self) -> None:
        store = self.home.store
        self._removers = [
            store.add_listener(self._on_notification, under=paths.ROOT),  # the flag and its own record
            store.add_session_listener(self._on_session_event),
        ]

    def _unlisten(self) -> None:
        for remove in self._removers:
            remove()
        self._removers = []

    # ---- the lease ------------------------------------------------------------------------------

    def lease_ok(self) -> bool:
        """Writes to the home may be acknowledged now (the write gate asks, as each ends)."""
        return self.lease_state in LEASE_OK and self.registration.fresh()

    def _on_lapse(self) -> None:
        """The lease ran out (the timer, or the gate found it so): hold writes, look again."""
        if self.lease_state in LEASE_OUT:
            return
        self._lease_to(LeaseState.LAPSED)
        self._lapsed_at = time.monotonic()
        log.warning("no heartbeat got through for %.1fs: holding writes until one does and the flag is "
                    "read again (a coordinator may have gone on without this agent)",
                    time.monotonic() - self.registration.renewed_at)
        self._wake.set()

    def _arm_lease_timer(self) -> None:
        if self._lease_timer is not None:
            self._lease_timer.cancel()
        delay = max(0.0, self.registration.lease_until - time.monotonic())
        self._lease_timer = asyncio.get_running_loop().call_later(delay, self._lease_due)

    def _lease_due(self) -> None:
        self._lease_timer = None
        if not self.registration.fresh():
            self._on_lapse()
        else:
            self._arm_lease_timer()

    async def _beat(self) -> None:
        interval = self.participant_timeout / BEATS_PER_TIMEOUT
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.wait_for(self.registration.beat(), interval * 2)
            except asyncio.CancelledError:
                raise
            except (MetadataStoreError, TimeoutError) as e:
                log.warning("heartbeat to %s failed: %s", self.registration.store.url, e or "no answer in time")
                continue
            self._arm_lease_timer()
            if self.lease_state in LEASE_OUT:
                self._wake.set()  # a heartbeat got through: read the flag again, then writes may flow

    # ---- following the flag ----------------------------------------------------------------------

    def _on_notification(self, notification: Notification) -> None:
        if notification.path == paths.FLAG or notification.path == self.record.path:
            self._wake.set()
        else:
            self.checks.on_notification(notification)

    def _on_session_event(self, event: SessionEvent) -> None:
        if event in (SessionEvent.SESSION_REESTABLISHED, SessionEvent.RECONNECTED):
            self._wake.set()

    def sessions_ready(self) -> None:
        """The agent has taken over its predecessor's sessions: the flag may be acted on."""
        self._sessions_ready.set()

    async def _follow(self) -> None:
        await self._sessions_ready.wait()
        while True:
            await wait_event(self._wake, POLL_SECONDS)
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
        if self.lease_state is LeaseState.LAPSED:
            await self._fence()
        fenced = self.lease_state is LeaseState.FENCED  # nothing lapses while fenced: still so below
        renewed_at = self.registration.renewed_at
        state = self.state = await read_state(self.home.store)
        await self.registration.ensure()
        if fenced:
            if renewed_at <= self._lapsed_at or not self.registration.fresh():
                return  # no heartbeat got through since: the flag we read proves nothing yet
            self._lease_to(LeaseState.RENEWED)  # read after a heartbeat got through: act on what it says
            self._arm_lease_timer()
            self.gate.wake_readers()
        if state.released_to is not None:
            assert state.flag is not None
            self._seen(state.flag.phase, state.flag.epoch)
            await self._complete(state.flag)
            self._wake.set()  # and now the new home's flag
            return
        flag = state.current_flag
        if flag is None:
            if self.holding:
                await self._roll_back("the migration flag was removed")
            self._seen(Phase.NOT_STARTED, state.arrived_epoch)
        else:
            self._seen(flag.phase, flag.epoch)
            if flag.phase is Phase.SYNCING:
                if self.holding or self._target is not None:  # a freeze of an older epoch never ended here
                    await self._roll_back("a new migration started")
            elif flag.holds_writes:  # a COMPLETED not yet released too: its coordinator carries the last changes
                await self._prepare(flag)
            elif flag.phase is Phase.FAILED:
                if self.holding or self._target is not None:
                    await self._roll_back(flag.reason or "failed")
        if self.lease_state is LeaseState.RENEWED and not self.holding:
            self._lease_to(LeaseState.HELD)
            await self.gate.open()
            log.info("heartbeat and flag read again: writes flow")

    def _seen(self, phase: Phase, epoch: int) -> None:
        if (phase, epoch) != (self.phase, self.epoch):
            log.info("migration phase %s (epoch %d)", phase.value, epoch)
            self.phase, self.epoch = phase, epoch
            if self._on_phase is not None:
                self._on_phase(phase)

    # ---- the states (``participant_states``: every move through these two) -----------------------

    @property
    def holding(self) -> bool:
        """This participant closed the gate for a migration and has not reopened it yet."""
        return self.freeze_state is not FreezeState.FOLLOWING

    def _prepared_for(self, epoch: int) -> bool:
        return self.freeze_state is FreezeState.PREPARED and self._freeze_epoch == epoch

    def _move(self, new: FreezeState, epoch: int | None = None) -> None:
        self.freeze_state = check_move(self.freeze_state, new)
        self._freeze_epoch = None if new is FreezeState.FOLLOWING else epoch

    def _lease_to(self, new: LeaseState) -> None:
        self.lease_state = check_move(self.lease_state, new)

    def _gate_opened(self) -> None:
        """The gate reopened at a switch or a rollback: the freeze is over here, and so is a fence
        whose lease was renewed (one still out is fenced again at the next step)."""
        self._move(FreezeState.FOLLOWING)
        if self.lease_state is LeaseState.RENEWED:
            self._lease_to(LeaseState.HELD)
        elif self.lease_state is LeaseState.FENCED:
            self._lease_to(LeaseState.LAPSED)

    async def _fence(self) -> None:
        """Close the gate for a lapsed lease (writes in flight drain; what they end with is
        unknown to their callers when the lease is still out)."""
        self._lease_to(LeaseState.FENCED)
        with contextlib.suppress(TimeoutError):
            await self.gate.close(self.drain_timeout)

    # ---- the phases ------------------------------------------------------------------------------

    async def _prepare(self, flag: MigrationFlag) -> None:
        if not self._prepared_for(flag.epoch):
            if self.freeze_state is FreezeState.PREPARED:  # a freeze of an older epoch never ended here
                await self._roll_back("a new migration started")
            await self._freeze(flag.epoch)
            if self._target is None:
                self._target = await self._open_target(flag.target_url)
            carried = await self.registry.recreate_in(self._target)
            # before the acknowledgement: every agent's floors are in place before anyone switches
            await floor_carried_sequentials(self._target, self.registry.ephemerals(), skip=self._carried_counter)
            self._move(FreezeState.PREPARED, flag.epoch)
            self.carried = carried
        await self.registration.acknowledge(flag.epoch)

    async def _freeze(self, epoch: int) -> None:
        """Close the gate for the freeze of ``epoch`` (held writes wait) and drain the writes in flight."""
        self._move(FreezeState.FROZEN, epoch)
        await self.gate.close(self.drain_timeout)

    async def _complete(self, flag: MigrationFlag, *, starting: bool = False) -> None:
        """The migration ``flag`` completed: the target becomes the home (register there, leave
        the old one), then route to it and release the held writes there."""
        if not self._prepared_for(flag.epoch) or self._target is None:
            # started (or restarted) after the freeze: nothing of ours is in the target yet
            await self._freeze(flag.epoch)
            if self._target is None:
                self._target = await self._open_target(flag.target_url)
            await self.registry.recreate_in(self._target)
            self._move(FreezeState.PREPARED, flag.epoch)
        target, old_home = self._target, self.home.store
        left_behind = self.registry.ephemerals()
        old_registration = await self._move_home(target)
        # the counters are carried by now: what the freeze left to them is looked at again
        await floor_carried_sequentials(target, self.registry.ephemerals())
        await self.gate.open(towards=target)
        self._gate_opened()
        # only now, serving from the target: an agent gone from the old home has switched (what
        # ``_clear_old_home`` of the others waits for)
        await self._leave(old_registration, leave=not starting)
        log.info("migration epoch %d completed: serving from %s, now this agent's home", flag.epoch, target.url)
        # the copies in the old home are ours (our session's there): deleted once the other agents
        # left it too, not now: one still serving from it would show its members a bookie or a
        # broker going away (Pulsar's "Bookie ... deleted" at every switch)
        self.clear_copies(old_home, left_behind)

    def clear_copies(self, old_home: MetadataStore, paths: Iterable[str]) -> None:
        """Delete this agent's copies of ``paths`` in ``old_home`` once no other agent is
        registered there (also what a predecessor process left in the store it served from, when
        this process switched away from it at start)."""
        task = asyncio.get_running_loop().create_task(self._clear_old_home(old_home, list(paths)), name="old home")
        self._clearing.add(task)
        task.add_done_callback(self._clearing.discard)

    async def _clear_old_home(self, old_home: MetadataStore, left_behind: Iterable[str]) -> None:
        """Wait (bounded) until no other agent is registered in ``old_home``, then delete this
        agent's copies of its members' ephemerals there (at once when stopped meanwhile)."""
        deadline = time.monotonic() + max(OLD_HOME_WAIT, 6 * self.participant_timeout)
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(MetadataStoreError):
                    others = [r for r in await list_participants(old_home) if r.node_id != self.record.node_id]
                    if not others:
                        break
                await asyncio.sleep(0.5)
        finally:
            await asyncio.shield(self._delete_copies(old_home, left_behind))

    async def _delete_copies(self, old_home: MetadataStore, left_behind: Iterable[str]) -> None:
        for path in left_behind:
            with contextlib.suppress(MetadataStoreError):
                got = await old_home.get(path)
                if got is not None and got[1].ephemeral and got[1].created_by_self:
                    await old_home.delete(path, expected_version=got[1].version)
        if old_home is not self.source:  # an earlier target: nothing of this agent's left there
            with contextlib.suppress(Exception):
                await old_home.close()

    async def _move_home(self, store: MetadataStore) -> Registration:
        """Register in ``store`` (a fresh lease there) and follow its flag; the registration in
        the old home is returned, to ``_leave`` once this agent serves from ``store``."""
        old = self.registration
        fresh = Registration(store, old.record, self.participant_timeout)
        await fresh.ensure()
        self._unlisten()
        self.registration = fresh
        self.home.move(store)
        self._listen()
        self._arrived, self._target = store, None
        self._arm_lease_timer()
        return old

    async def _leave(self, old: Registration, *, leave: bool) -> None:
        """Remove this agent's record from the home it left (``leave``), or, starting, sweep the
        records an earlier process of this agent left there."""
        if leave:
            try:
                await old.leave()
            except MetadataStoreError as e:  # it goes with our session there anyway
                log.warning("could not remove participant record %s from %s: %s", old.record.path, old.store.url, e)
        else:  # starting: a record an earlier process of this agent left there, on a resumed session
            with contextlib.suppress(MetadataStoreError):
                await old.sweep()

    async def _roll_back(self, reason: str) -> None:
        log.info("migration rolled back (%s): serving from %s", reason, self.home.store.url)
        target, self._target = self._target, None
        if self.freeze_state is FreezeState.PREPARED:  # undone: re-created again if it freezes again
            self._move(FreezeState.FROZEN, self._freeze_epoch)
        if self.router.active is not self.home.store:
            # COMPLETED is final: only a flag removed by hand gets here; never leave the target then
            log.error("not routing back to %s: this agent already serves from %s", self.home.store.url,
                      self.router.active.url)
            self._target = target
            return
        await self.gate.open(towards=self.home.store)
        self._gate_opened()
        if target is not None:
            # closing the target session deletes every ephemeral re-created there
            with contextlib.suppress(Exception):
                await target.close()
