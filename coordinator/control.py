"""The control API behind ``metashift migrate``: start, status, abort. Everything is read from
and written to the source store, where the flag lives; no agent has to be reached."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from metashift.migration import paths
from metashift.migration.flag import FlagChanged, MigrationFlag, move, new_flag, read_flag, write_flag
from metashift.migration.participants import list_participants
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, MetadataStoreError, StoreURL, open_store, parse_url

from .cleanup import first_path
from .election import LeaderElection

#: How long ``start`` waits for the coordinator to remove a failed migration's copy.
CLEAN_WAIT = 60.0


class MigrationRefused(MetadataStoreError):
    """The command cannot be done in the migration's present state; nothing was written."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


async def start(source: MetadataStore, target_url: str | StoreURL) -> MigrationFlag:
    """Start a migration to ``target_url``: checks, then the flag (created, or replacing a FAILED
    one). Raises ``MigrationRefused`` (nothing written) when a migration runs or completed, when
    no agent is registered, or when the target is not empty."""
    target = parse_url(target_url) if isinstance(target_url, str) else target_url
    flag = await read_flag(source)
    if flag is not None and flag.phase.in_progress:
        raise MigrationRefused(f"a migration is already in progress (phase {flag.phase.value})")
    if flag is not None and flag.phase is Phase.COMPLETED:
        raise MigrationRefused(f"the migration to {flag.target_url} is already completed")
    deadline = time.monotonic() + CLEAN_WAIT
    while flag is not None and flag.phase is Phase.FAILED and not flag.target_cleaned:
        # the coordinator is removing the failed copy from the target: a start must not race it
        if time.monotonic() > deadline:
            raise MigrationRefused(
                "the previous migration failed and its copy is not yet removed from the target "
                "(is a coordinator running?); try again later"
            )
        await asyncio.sleep(0.2)
        flag = await read_flag(source)
    participants = await list_participants(source)
    if not participants:
        raise MigrationRefused(f"no agent is registered under {paths.PARTICIPANTS}: nobody would act on a migration")
    async with await open_store(target, watch=False) as store:
        found = await first_path(store)
    if found is not None:
        raise MigrationRefused(f"the target {target} is not empty: it holds {found}")
    try:
        return await write_flag(source, new_flag(target.public(), flag), flag.version if flag else -1)
    except FlagChanged:
        raise MigrationRefused("another command changed the migration flag at the same moment; try again") from None


async def abort(source: MetadataStore) -> MigrationFlag:
    """Fail the running migration with reason "aborted" (agents route back to the source)."""
    while True:
        flag = await read_flag(source)
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


@dataclass
class Status:
    """What ``migrate status`` shows; ``to_dict`` is its JSON."""

    flag: MigrationFlag | None
    participants: list[dict[str, Any]]
    copy: dict[str, Any] | None
    leader: str | None

    def to_dict(self) -> dict[str, Any]:
        flag = self.flag
        return {
            "phase": flag.phase.value if flag else Phase.NOT_STARTED.value,
            "target": flag.target_url if flag else None,
            "epoch": flag.epoch if flag else 0,
            "reason": flag.reason if flag else None,
            "coordinator": (flag.coordinator if flag and flag.coordinator else self.leader),
            "participants": self.participants,
            "copy": self.copy,
            "elapsed_s": round(flag.elapsed_s, 3) if flag else 0.0,
            "target_cleaned": flag.target_cleaned if flag else False,
        }


async def status(source: MetadataStore) -> Status:
    flag = await read_flag(source)
    epoch = flag.epoch if flag else 0
    participants = [
        {"node_id": p.node_id, "role": p.role, "address": p.address,
         "acknowledged": flag is not None and p.acknowledged == epoch, "path": p.path}
        for p in await list_participants(source)
    ]
    copy = None
    got = await source.get(paths.PROGRESS)
    if got is not None and flag is not None:
        try:
            body = json.loads(got[0])
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("epoch") == epoch:
            copy = {k: body.get(k) for k in ("stage", "done", "total", "verified", "passes", "pending", "counters",
                                          "counters_total")}
    leader = await LeaderElection(source, "").leader()
    return Status(flag, participants, copy, leader)
