"""Watching the source, from the start to the switch, for members that join around the agents.

``migrate start`` refuses while a broker, bookie or any client holds an ephemeral of the source
on a session no agent holds (``preflight``). A member may still join that way after the check: a
broker restarted onto the store directly, a new bookie configured by hand. Its ephemerals give it
away: the guard looks, at the start of every full pass (once the change stream is confirmed), at
every live ephemeral of the source, and then at who holds each node created since (the change
tracker's ``created``). One held by a session that no agent holds fails the migration before
COMPLETED, naming the path and the session: the cluster would be split in two otherwise.

A migration started with ``--force`` past such sessions lets their ephemerals be as long as they
stay untouched: the first write to one of them (a broker rewriting its registration or load
report, a new ephemeral) shows the member is still at work around the agents, and fails it.
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
        self.tolerated: dict[str, Holder] = {}
        """Ephemerals of the sessions ``--force`` accepted, as the last scan found them."""
        self.registered: dict[int, list[tuple[str, str, str]]] = {}
        """The broker and bookie registrations of each session no agent holds, as the last scan
        found them: a new ephemeral of such a session is named by its member, not as "a client"."""

    async def scan(self, flag: MigrationFlag) -> str | None:
        """Every live ephemeral of the source: why the migration must fail, or ``None``."""
        found = await census(self.source, await list_participants(self.source))
        accepted = _accepted(flag)
        self.tolerated = {p: h for h in found.bypassing if h.owner in accepted for p in h.paths}
        self.registered = {h.owner: h.members for h in found.bypassing if h.members}
        return _verdict(flag, found.bypassing)

    async def check(self, flag: MigrationFlag) -> str | None:
        """The nodes created since the last look, and the tolerated ephemerals: why the migration
        must fail, or ``None``."""
        touched = sorted(self.tolerated.keys() & self.tracker.since_pass)
        for path, got in zip(touched, await self.source.batch([GetOp(p) for p in touched]), strict=True):
            holder = self.tolerated[path]
            if isinstance(got, MetadataStoreError):
                raise got
            if not isinstance(got, tuple) or got[1].owner != holder.owner:
                del self.tolerated[path]  # gone: the member left the source (its session ended)
                continue
            what = f"{holder.members[0][0]} {holder.members[0][1]}" if holder.members else "a client"
            reason = (f"a member started past the pre-flight check (--force) writes around the agents: {path}, an "
                      f"ephemeral of session {holder.session}, changed ({what} reaches the source directly; it "
                      "would be split off by the migration)")
            log.warning("%s", reason)
            return reason
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
        for holder in found.bypassing:
            if not holder.members:
                holder.members = list(self.registered.get(holder.owner, ()))
        # a new ephemeral is a write: from a session --force accepted too
        return _verdict(flag, found.bypassing, accept=False)


def _accepted(flag: MigrationFlag) -> set[int]:
    return set(flag.forced.sessions) if flag.forced is not None else set()


def _verdict(flag: MigrationFlag, bypassing: list[Holder], *, accept: bool = True) -> str | None:
    accepted = _accepted(flag) if accept else set()
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
