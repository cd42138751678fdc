"""What the members of a Pulsar cluster saw of their agents' restarts (issue 45): their own logs,
read over a window of wall-clock time, and their registrations in the metadata store, polled all
along through an agent that does not restart.

From the logs (each line starts with milliseconds since the epoch, ``configs.LOG4J2``):

- session events: the session lost or expired (Pulsar's ``ZKSessionWatcher``: "ZooKeeper session
  expired", "reconnection timeout. Notifying session is lost"; the broker's "Received metadata
  service session event: SessionLost"; ZooKeeper's client: "session 0x... has expired"; a
  ``SessionExpiredException`` a call failed with), a new session that replaced it
  (``SessionReestablished``), and a connection lost and regained on the same session
  (``ConnectionLost``, ``Reconnected``: ZooKeeper's own failover, no loss);
- every session ZooKeeper's client established ("Session establishment complete on server ...,
  session id = 0x..., negotiated timeout = N"): the same id before and after a restart is the
  session kept, another one is a new session;
- the bookie unregistered as the brokers see it (``PulsarRegistrationClient``: "Bookie ...
  deleted", then "created" again), and the bookie's own registration lines;
- locks lost (``ResourceLockImpl``, ``LeaderElectionImpl``, ``OwnershipCache``), locks
  revalidated after a new session, bundles unloaded, ``Not enough bookies``.

``RegistrationWatch`` polls each member's registration node (``/ledgers/available/<bookie>``,
``/loadbalance/brokers/<broker>``) through an agent's gRPC socket, which answers from wherever the
cluster lives (the source, or the target after a migration's switch): the stretches it was absent
(the agent's gRPC answers carry no ephemeral owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from metashift.stores import MetadataStoreError

from .evidence import lines

#: A session that ended: the member must start a new one (its ephemerals go with the old).
_LOST = re.compile(
    r"ZooKeeper session expired|session reconnection timeout|Notifying session is lost"
    r"|session event:\s*SessionLost|session 0x[0-9a-f]+ has expired|session with metadata service was lost"
    r"|SessionExpiredException|KeeperErrorCode = Session expired"
)
#: ZooKeeper's client says this on every lost connection, expired or not.
_NOT_LOST = re.compile(r"except it is a SessionExpiredException")
_REESTABLISHED = re.compile(r"session event:\s*SessionReestablished|session has been re-established")
_DISCONNECTED = re.compile(r"ZooKeeper client is disconnected|session event:\s*ConnectionLost")
_RECONNECTED = re.compile(r"session event:\s*Reconnected|reconnection with server quorum")
_ESTABLISHED = re.compile(r"Session establishment complete on server \S+, session id = (0x[0-9a-f]+), "
                          r"negotiated timeout = (\d+)")  # fmt: skip
_BOOKIE_DELETED = re.compile(r"Bookie (\S+) deleted")
_BOOKIE_CREATED = re.compile(r"Bookie (\S+) created")
#: The bookie's own account of its registration (BookKeeper's and Pulsar's registration managers).
_BOOKIE_REGISTRATION = re.compile(
    r"Previous bookie registration .* exists|was already registered as|RegisterBookie|registration (?:node|znode)",
    re.IGNORECASE,
)
_LOCK_LOST = re.compile(
    r"Lock on resource \S+ was invalidated|Marked as expired|Leadership on \S+ with value .* was lost"
    r"|Detected ownership loss|Failed to revalidate the lock"
)
_LOCK_REVALIDATED = re.compile(
    r"Revalidating all the existing locks|Deleting stale lock|re-acquired (?:stale |missing )?lock"
)
_UNLOADED = re.compile(
    r"Disabling ownership|Unloading \S+ namespace-bundle|is being unloaded|Unloading bundle|Unloaded serviceUnit"
    r"|Namespace \S+ unloaded successfully"
)
_NOT_ENOUGH_BOOKIES = re.compile(r"Not enough bookies|NotEnoughBookies")
#: Lines kept per kind (a report, not the whole log).
KEEP = 8


@dataclass
class MemberLog:
    """What one member's log says over a window."""

    name: str
    session_before: str | None = None
    """The session the member had when the window opened (the last one established before it)."""
    sessions: list[str] = field(default_factory=list)
    """Every session id ZooKeeper's client established in the window, in order (``0x...``): the
    same as ``session_before`` when a reconnection kept it."""
    negotiated_ms: list[int] = field(default_factory=list)
    """The session timeout granted each time."""
    lost: list[str] = field(default_factory=list)
    lost_at: float | None = None
    """When the first line of ``lost`` was logged (wall clock, s)."""
    reestablished: list[str] = field(default_factory=list)
    disconnected: int = 0
    reconnected: int = 0
    bookies_deleted: list[tuple[float, str]] = field(default_factory=list)
    bookies_created: list[tuple[float, str]] = field(default_factory=list)
    registration: list[str] = field(default_factory=list)
    locks_lost: list[str] = field(default_factory=list)
    locks_revalidated: int = 0
    unloaded: list[str] = field(default_factory=list)
    not_enough_bookies: int = 0
    first_not_enough_bookies: str = ""

    def new_sessions(self) -> list[str]:
        """The sessions established in the window that are not the one the member had before."""
        return [s for s in dict.fromkeys(self.sessions) if s != self.session_before]

    def unregistered(self) -> list[tuple[str, float, float | None]]:
        """(bookie, deleted at, created again at or ``None``) each time this broker saw a bookie go
        (the lines of its registration clients within a second of each other are one deletion)."""
        out: list[tuple[str, float, float | None]] = []
        for at, bookie in self.bookies_deleted:
            if out and out[-1][0] == bookie and at - out[-1][1] < 1.0:
                continue
            back = next((ts for ts, b in self.bookies_created if b == bookie and ts >= at), None)
            out.append((bookie, at, back))
        return out

    def to_dict(self, since: float = 0.0) -> dict[str, Any]:
        """The figures; times are seconds after ``since`` (the window's start)."""
        return {
            "session_before": self.session_before, "sessions": self.sessions, "new_sessions": self.new_sessions(),
            "negotiated_ms": sorted(set(self.negotiated_ms)),
            "lost_at_s": None if self.lost_at is None else round(self.lost_at - since, 1),
            "lost": self.lost[:KEEP], "reestablished": self.reestablished[:KEEP],
            "disconnected": self.disconnected, "reconnected": self.reconnected,
            "bookie_unregistered": [{"bookie": b, "at_s": round(at - since, 1),
                                     "for_s": None if back is None else round(back - at, 1)}
                                    for b, at, back in self.unregistered()],
            "registration": self.registration[:KEEP], "locks_lost": self.locks_lost[:KEEP],
            "locks_revalidated": self.locks_revalidated, "unloaded": self.unloaded[:KEEP],
            "not_enough_bookies": self.not_enough_bookies,
        }  # fmt: skip


def read_member_log(name: str, text: str, since: float, until: float) -> MemberLog:
    """The window ``[since, until]`` (wall clock, s) of one member's log."""
    m = MemberLog(name)
    for ts, _level, line in lines(text):
        if ts < since and (found := _ESTABLISHED.search(line)):
            m.session_before = found.group(1)
        if not since <= ts <= until:
            continue
        short = line[:400]
        if found := _ESTABLISHED.search(line):
            m.sessions.append(found.group(1))
            m.negotiated_ms.append(int(found.group(2)))
        if _LOST.search(line) and not _NOT_LOST.search(line):
            m.lost.append(short)
            m.lost_at = ts if m.lost_at is None else m.lost_at
        elif _REESTABLISHED.search(line):
            m.reestablished.append(short)
        elif _DISCONNECTED.search(line):
            m.disconnected += 1
        elif _RECONNECTED.search(line):
            m.reconnected += 1
        if found := _BOOKIE_DELETED.search(line):
            m.bookies_deleted.append((ts, found.group(1)))
        elif found := _BOOKIE_CREATED.search(line):
            m.bookies_created.append((ts, found.group(1)))
        if name.startswith("bookie") and _BOOKIE_REGISTRATION.search(line):
            m.registration.append(short)
        if _LOCK_LOST.search(line):
            m.locks_lost.append(short)
        elif _LOCK_REVALIDATED.search(line):
            m.locks_revalidated += 1
        if _UNLOADED.search(line):
            m.unloaded.append(short)
        if _NOT_ENOUGH_BOOKIES.search(line):
            m.not_enough_bookies += 1
            m.first_not_enough_bookies = m.first_not_enough_bookies or short
    return m


def last_session(text: str) -> str | None:
    """The id of the last session ZooKeeper's client established in this log (``0x...``)."""
    found = [m.group(1) for _ts, _level, line in lines(text) if (m := _ESTABLISHED.search(line))]
    return found[-1] if found else None


@dataclass
class Presence:
    """One registration node over a watch: when it was absent."""

    path: str
    absent: list[tuple[float, float | None]] = field(default_factory=list)
    """(from, to) of every stretch it was absent (``None``: still absent at the end)."""
    unknown: int = 0
    """Polls that got no answer."""

    def absent_s(self) -> float:
        end = time.time()
        return sum((to if to is not None else end) - since for since, to in self.absent)

    def to_dict(self, since: float = 0.0) -> dict[str, Any]:
        """The figures; times are seconds after ``since`` (the window's start)."""
        return {"absent": [{"at_s": round(a - since, 1), "for_s": None if to is None else round(to - a, 1)}
                           for a, to in self.absent], "unknown_polls": self.unknown}  # fmt: skip


class RegistrationWatch:
    """Polls ``paths`` every ``period`` seconds through the agent at ``address`` (a
    ``metashift.client`` session of our own)."""

    def __init__(self, address: str, paths: list[str], period: float = 0.2) -> None:
        self.address = address
        self.period = period
        self.presence = {p: Presence(p) for p in paths}
        self._task: asyncio.Task[None] | None = None
        self._client: Any = None

    async def start(self) -> None:
        from metashift.client import connect

        self._client = await connect(self.address, timeout=5.0)
        await self._poll()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            await self._poll()

    async def _poll(self) -> None:
        now = time.time()
        for path, p in self.presence.items():
            try:
                there = await self._client.exists(path)
            except (MetadataStoreError, OSError):
                p.unknown += 1
                continue
            gone = p.absent and p.absent[-1][1] is None
            if not there and not gone:
                p.absent.append((now, None))
            elif there and gone:
                p.absent[-1] = (p.absent[-1][0], now)

    async def stop(self) -> dict[str, Presence]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
        return self.presence


@dataclass
class MemberView:
    """Everything the members saw over one window: their logs, their registrations, the traffic's
    publishes and admin calls, and whether ``sub`` received every message acknowledged by its end."""

    label: str
    since: float
    until: float
    logs: dict[str, MemberLog] = field(default_factory=dict)
    presence: dict[str, Presence] = field(default_factory=dict)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    publishes_failed: Counter[str] = field(default_factory=Counter)
    admin_failed: list[str] = field(default_factory=list)
    longest_publish_ms: float = 0.0
    acknowledged: int = 0
    not_received: int = 0
    members_restarted: list[str] = field(default_factory=list)
    """Pulsar processes that are not the ones running at the window's start."""
    notes: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """What a member noticed of the restarts (nothing, when they cost it nothing)."""
        out: list[str] = []
        for name, m in self.logs.items():
            out += [f"{name} session lost: {line}" for line in m.lost[:3]]
            out += [f"{name} new session: {line}" for line in m.reestablished[:3]]
            if m.new_sessions():
                out.append(f"{name} new ZooKeeper session(s) {m.new_sessions()} (it had {m.session_before})")
            out += [f"{name} saw bookie {b} unregistered {at - self.since:.1f} s into the window, "
                    + (f"for {back - at:.1f} s" if back is not None else "not back by its end")
                    for b, at, back in m.unregistered()]  # fmt: skip
            out += [f"{name} lock lost: {line}" for line in m.locks_lost[:3]]
            out += [f"{name} bundle unloaded: {line}" for line in m.unloaded[:3]]
            if m.not_enough_bookies:
                out.append(f"{name}: {m.not_enough_bookies} lines of Not enough bookies: {m.first_not_enough_bookies}")
        for path, p in self.presence.items():
            for since, to in p.absent:
                out.append(f"{path} absent from the store {since - self.since:.1f} s into the window, "
                           + (f"for {to - since:.1f} s" if to is not None else "still at its end"))
        if self.publishes_failed:
            out.append(f"{sum(self.publishes_failed.values())} publishes failed: {dict(self.publishes_failed)}")
        out += [f"admin call failed: {e[:300]}" for e in self.admin_failed[:5]]
        if self.not_received:
            out.append(f"{self.not_received} acknowledged messages not received")
        out += [f"{name} restarted or stopped" for name in self.members_restarted]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.label, "seconds": round(self.until - self.since, 1), "restarts": self.restarts,
            "members": {name: m.to_dict(self.since) for name, m in self.logs.items()},
            "registrations": {path: p.to_dict(self.since) for path, p in self.presence.items()},
            "publishes_failed": dict(self.publishes_failed), "admin_failed": self.admin_failed[:5],
            "admin_failed_count": len(self.admin_failed), "longest_publish_ms": self.longest_publish_ms,
            "acknowledged": self.acknowledged, "not_received": self.not_received,
            "members_restarted": self.members_restarted, "notes": self.notes,
        }  # fmt: skip
