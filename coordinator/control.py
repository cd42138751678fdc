"""The control API behind ``metashift migrate``: start, status, abort. Everything is read from
and written to the source store (where the cluster lives and the flag is), no agent reached."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from metashift.migration.flag import FlagChanged, Forced, MigrationFlag, move, new_flag, now_ms, write_flag
from metashift.migration.origin import StoreState, read_state
from metashift.migration.participants import list_participants
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, MetadataStoreError, StoreURL, open_store, parse_url

from .cleanup import empty_target, first_path
from .preflight import DRY_OPEN_WAIT, Preflight
from .preflight import check as preflight_check
from .status import Status, status

#: How long ``start`` waits for the coordinator to remove a failed migration's copy.
CLEAN_WAIT = 60.0
#: How long ``--clean-target`` waits for agents to leave a store the cluster migrated away from
#: (each leaves once it has moved home: a heartbeat period or so after COMPLETED).
LEAVE_WAIT = 30.0


class MigrationRefused(MetadataStoreError):
    """The command cannot be done in the migration's present state; nothing was written."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


async def _startable(source: MetadataStore, target: StoreURL) -> StoreState:
    """The source's state once a start may go ahead (a failed copy removed); refused otherwise."""
    if target.overlaps(source.url):
        if target.root == source.url.root:
            raise MigrationRefused(f"the target is the source ({target}): a migration needs another store")
        raise MigrationRefused(f"the target {target} and the source {source.url} share nodes (one lies inside "
                               "the other): a migration needs another store")
    deadline = time.monotonic() + CLEAN_WAIT
    while True:
        state = await read_state(source)
        flag = state.flag
        if state.left_for is not None:
            assert flag is not None
            raise MigrationRefused(
                f"the migration to {flag.target_url} is already completed (epoch {flag.epoch}): the cluster lives "
                f"there now; the way back starts from there: metashift migrate start --source {flag.target_url} "
                f"--target {source.url.public()} --clean-target"
            )
        if flag is not None and flag.phase.in_progress:
            raise MigrationRefused(f"a migration is already in progress (phase {flag.phase.value})")
        if flag is None or flag.phase is not Phase.FAILED or flag.target_cleaned:
            return state
        # the coordinator is removing the failed copy from the target: a start must not race it
        if time.monotonic() > deadline:
            raise MigrationRefused(
                "the previous migration failed and its copy is not yet removed from the target "
                "(is a coordinator running?); try again later"
            )
        await asyncio.sleep(0.2)


class PreflightRefused(MigrationRefused):
    """The pre-flight check found problems (a member bypassing the agents, an agent that cannot
    open the target); ``report`` names each. ``--force --reason`` overrides."""

    def __init__(self, report: Preflight) -> None:
        self.report = report
        n = len(report.problems)
        super().__init__(
            f"not starting: the pre-flight check found {n} problem{'s' if n > 1 else ''} (listed above; "
            "metashift migrate check shows them all; --force --reason TEXT starts anyway)"
        )


async def start(
    source: MetadataStore, target_url: str | StoreURL, *, clean_target: bool = False, force_reason: str | None = None,
    wait: float = DRY_OPEN_WAIT,
) -> MigrationFlag:
    """``start_checked``, for callers that want only the flag."""
    flag, _report = await start_checked(source, target_url, clean_target=clean_target, force_reason=force_reason,
                                        wait=wait)
    return flag


async def start_checked(
    source: MetadataStore, target_url: str | StoreURL, *, clean_target: bool = False, force_reason: str | None = None,
    wait: float = DRY_OPEN_WAIT,
) -> tuple[MigrationFlag, Preflight]:
    """Start a migration to ``target_url``: the pre-flight check (``preflight``), then the flag
    (created, or replacing a FAILED one, or one the cluster came back from). Raises
    ``MigrationRefused`` (nothing written) when a migration runs or completed from here, when no
    agent is registered, when the target is the source, or when the target is not empty; and
    ``PreflightRefused`` when a member bypasses the agents or an agent cannot open the target,
    unless ``force_reason`` is given (it goes into the flag, with what was overridden).
    ``clean_target``: a target that is not empty is emptied first (its migration flag kept:
    ``cleanup``), unless a cluster lives or migrates there. ``wait``: how long the check waits
    for the agents' dry opens of the target."""
    target = parse_url(target_url) if isinstance(target_url, str) else target_url
    state = await _startable(source, target)
    report = await preflight_check(source, target, wait=wait, clean_target=clean_target, startable=False)
    if report.refusals:
        raise MigrationRefused(report.refusals[0])
    if report.problems and force_reason is None:
        raise PreflightRefused(report)
    if clean_target:
        async with await open_store(target, watch=False) as store:
            if await first_path(store) is not None:
                await check_cleanable(store)
                await empty_target(store)
    flag = state.flag
    forced = None
    if force_reason is not None:
        forced = Forced(force_reason, tuple(report.problems), tuple(report.bypassing_owners))
    try:
        fresh = dataclasses.replace(new_flag(target.public(), flag, state.arrived_epoch), forced=forced)
        return await write_flag(source, fresh, flag.version if flag else -1), report
    except FlagChanged:
        raise MigrationRefused("another command changed the migration flag at the same moment; try again") from None


async def check_cleanable(target: MetadataStore) -> None:
    """Refuse to empty a store a cluster lives on or migrates from: agents registered there, or a
    migration of its own in progress."""
    state = await read_state(target)
    flag = state.current_flag
    if flag is not None and flag.phase.in_progress:
        raise MigrationRefused(
            f"the target {target.url} holds a migration in progress (phase {flag.phase.value}, epoch {flag.epoch}): "
            "not removing anything there"
        )
    agents = await list_participants(target)
    deadline = time.monotonic() + LEAVE_WAIT  # whatever the clock of the host that wrote the flag says
    while agents and _leaving(state) and time.monotonic() < deadline:
        # the cluster left this store moments ago (its flag says COMPLETED): its agents leave it
        # one by one as they move home; a way back started at once must not find them still there
        await asyncio.sleep(0.2)
        state = await read_state(target)
        agents = await list_participants(target)
    if agents:
        names = ", ".join(sorted({a.node_id for a in agents}))
        raise MigrationRefused(
            f"agents are registered in the target {target.url} ({names}): a cluster lives there; not removing anything"
        )


def _leaving(state: StoreState) -> bool:
    """The cluster left this store less than ``LEAVE_WAIT`` ago: agents still registered there may
    be on their way out."""
    flag = state.flag
    return state.left_for is not None and flag is not None and now_ms() - flag.phase_since < LEAVE_WAIT * 1000


async def abort(source: MetadataStore) -> MigrationFlag:
    """Fail the running migration with reason "aborted" (agents route back to the source)."""
    while True:
        state = await read_state(source)
        flag = state.current_flag
        if flag is None:
            raise MigrationRefused("no migration has been started")
        if flag.phase is Phase.COMPLETED:
            raise MigrationRefused("the migration already completed; abort is only possible before COMPLETED")
        if flag.phase is Phase.FAILED:
            raise MigrationRefused(f"the migration already failed ({flag.reason})")
        try:
            return await move(source, flag, Phase.FAILED, reason="aborted")
        except FlagChanged:
            continue  # moved meanwhile (by the coordinator): decide again on what it is now


__all__ = ["MigrationRefused", "PreflightRefused", "Status", "abort", "check_cleanable", "start", "start_checked",
           "status"]
