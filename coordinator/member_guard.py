"""Watching the source, from the start to the switch, for members that join around the agents.

``migrate start`` refuses while a broker, bookie or any client holds an ephemeral of the source
on a session no agent holds (``preflight``). A member may still join that way after the check: a
broker restarted onto the store directly, a new bookie configured by hand. Its ephemerals give it
away: the guard looks, at the start of every full pass (once the change stream is confirmed), at
every live ephemeral of the source, and then at who holds each node created since (the change
tracker's ``created``). One held by a session that no agent holds, and that ``--force`` did not
accept at the start, fails the migration before COMPLETED, naming the path and the session: the
cluster would be split in two otherwise.
"""

from __future__ import annotations

import logging

from metashift.migration import paths
from metashift.migration.flag import MigrationFlag
from metashift.migration.members import Census, Holder, census, session_name
from metashift.migration.participants import list_participants
from metashift.stores import GetOp, MetadataStoreError, Store

from .change_tracker import ChangeTracker

log = logging.getLogger(__name__)

#: Created paths read per batch.
_BATCH = 512


class MemberGuard:
    """Finds ephemerals of the source held by a session no agent holds (the module's doc)."""

    def __init__(self, source: Store, tracker: ChangeTracker) -> None:
        self.source = source
        self.tracker = tracker

    async def scan(self, flag: MigrationFlag) -> str | None:
        """Every live ephemeral of the source: why the migration must fail, or ``None``."""
        found = await census(self.source, await list_participants(self.source))
        return _verdict(flag, found.bypassing)

    async def check(self, flag: MigrationFlag) -> str | None:
        """The nodes created since the last look: why the migration must fail, or ``None``."""
        created = sorted(p for p in self.tracker.take_created() if not p.startswith(paths.PREFLIGHT))
        if not created:
            return None
        owned: list[tuple[str, int]] = []
        for i in range(0, len(created), _BATCH):
            chunk = created[i : i + _BATCH]
            for path, got in zip(chunk, await self.source.batch([GetOp(p) for p in chunk]), strict=True):
                if isinstance(got, MetadataStoreError):
                    raise got
                if isinstance(got, tuple) and got[1].owner:
                    owned.append((path, got[1].owner))
        if not owned:
            return None
        # read after the nodes: an agent that registered meanwhile is known
        found = Census(agents={r.owner: r.node_id for r in await list_participants(self.source) if r.owner})
        for path, owner in owned:
            found.add(path, owner)
        return _verdict(flag, found.bypassing)


def _verdict(flag: MigrationFlag, bypassing: list[Holder]) -> str | None:
    accepted = set(flag.forced.sessions) if flag.forced is not None else set()
    joined = [h for h in bypassing if h.owner not in accepted]
    if not joined:
        return None
    holder = joined[0]
    first = sorted(holder.paths)[0]
    what = f"{holder.members[0][0]} {holder.members[0][1]}" if holder.members else "a client"
    reason = (f"a member joined around the agents: {first} is an ephemeral of session {session_name(holder.owner)}, "
              f"which no agent holds ({what} reaches the source directly; it would be split off by the migration)")
    log.warning("%s", reason)
    return reason
