"""The ZooKeeper sessions a predecessor process left (``agent.core.handover``), taken over at start.

A session is carried over when its timeout has not passed since the predecessor's last tick and
every ephemeral it owned is still an ephemeral of the agent's store session (which the agent
resumed), or gone from it (deleted: a delete in flight at a kill, as ZooKeeper would have applied
it): its client re-attaches with its id and password and finds everything as it was.
Anything less fails closed, as ZooKeeper does: the session is not carried (its client is told it
expired when it reconnects) and what is left of its ephemerals is deleted before any client is
served, so no member ever finds a registration of its own that is about to vanish.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from metashift.agent.core.handover import HandedState
from metashift.agent.zookeeper.session import ZkSessions
from metashift.stores import MetadataStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CarryOver:
    """What became of a predecessor's sessions."""

    carried: int = 0
    expired: int = 0
    """Sessions whose timeout had passed: their ephemerals deleted."""
    broken: int = 0
    """Sessions with an ephemeral no longer the agent's (the store session was not resumed, or
    the node was deleted or replaced meanwhile): not carried, what was left deleted."""
    ephemerals: int = 0
    """Ephemerals carried with the sessions."""
    left: tuple[str, ...] = ()
    """Ephemerals of this agent's store session that no session carried over owns: to delete."""


async def carry_over(handed: HandedState, sessions: ZkSessions, store: MetadataStore) -> CarryOver:
    """Take over the ZooKeeper sessions of ``handed`` whose ephemerals ``store`` (the active store,
    its session resumed or not) still holds as its own. What is left of the others (and of the
    sessions that ended without their deletes) is named in ``CarryOver.left``: the caller deletes
    it through the write gate (a freeze holds those deletes like any write)."""
    age = handed.age()
    now = time.monotonic()
    carried = expired = broken = ephemerals = 0
    left: list[str] = []
    for path in sorted(handed.orphans):
        got = await store.get(path)
        if got is not None and got[1].ephemeral and got[1].created_by_self:
            left.append(path)
    for session in handed.sessions.values():
        found: dict[str, bytes] = {}
        lost: list[str] = []
        for path in sorted(session.ephemerals):
            got = await store.get(path)
            if got is not None and got[1].ephemeral and got[1].created_by_self:
                found[path] = got[0]
            elif got is not None or not store.resumed:
                # another session's node there now, or our store session was not resumed (its
                # ephemerals went or go with it): the client would believe it holds what it does not
                lost.append(path)
            # else: gone from a session that lived on: deleted (the client's own delete in
            # flight at the kill, or another client's), which the session may well outlive
        whole = not lost
        if session.zk_id and age < session.timeout and whole:
            sessions.restore(session, found, last_seen=now - age)
            carried += 1
            ephemerals += len(found)
            continue
        if not session.zk_id:
            pass  # a gRPC session: its stream ended with the process, and so did it
        elif age >= session.timeout:
            expired += 1
            log.info("zookeeper session %#x expired while no agent served it (%.1fs > %.1fs timeout)",
                     session.zk_id, age, session.timeout)
        else:
            broken += 1
            log.warning("zookeeper session %#x not carried over: %d of its %d ephemeral(s) are no longer "
                        "this agent's (%s); its client is told it expired", session.zk_id, len(lost),
                        len(session.ephemerals), ", ".join(lost[:5]) + (" ..." if len(lost) > 5 else ""))
        left += sorted(found)
    return CarryOver(carried, expired, broken, ephemerals, tuple(left))
