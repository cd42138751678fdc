"""``SimulatedServer``: an in-process metadata store server for the protocol simulator and fast
unit tests. One tree (``tree``), the sessions that hold its ephemerals, the stores subscribed to
its notifications, and the faults the simulator injects (``faults``). Time is the running event
loop's (``loop.time()``), so a virtual clock drives it as it drives everything else.

Sessions expire lazily: every call first expires the sessions not heard from for their timeout,
deleting their ephemerals and notifying as the write would. No task of its own runs, so a
simulation decides every step and nothing is left running.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import StoreUnavailable
from ..notifications import Notification
from .faults import CallFault, FaultPlan, NoFaults
from .tree import Tree

Subscriber = Callable[[Notification], None]


class SessionExpired(StoreUnavailable):
    """The server no longer knows the session: it expired, and its ephemerals are gone."""

    write_may_have_happened = False


@dataclass
class SimSession:
    """One session: its timeout and when the server last heard from it."""

    id: int
    timeout: float
    last_heard: float


class SimulatedServer:
    """An in-process metadata store: one tree, its sessions, its subscribers and its faults."""

    def __init__(self, name: str, *, faults: FaultPlan | None = None, streams: int = 1) -> None:
        self.name = name
        self.streams = streams
        """Notification streams, each in write order but not with one another (Oxia: one per
        shard); a path's stream is ``stream_of``."""
        self.tree = Tree()
        self.faults: FaultPlan = faults if faults is not None else NoFaults()
        self.unreachable = False
        """Every call is refused (not applied) while True: the store is down or cut off."""
        self.sessions: dict[int, SimSession] = {}
        self._ids = itertools.count(1)
        self._subscribers: list[Subscriber] = []

    # ---- sessions -------------------------------------------------------------------------------

    def open_session(self, timeout: float) -> int:
        session = SimSession(next(self._ids), timeout, _now())
        self.sessions[session.id] = session
        return session.id

    def heard_from(self, session_id: int) -> None:
        """A call or a heartbeat of ``session_id`` reached the server; ``SessionExpired`` when
        the server no longer knows it."""
        session = self.sessions.get(session_id)
        if session is None:
            raise SessionExpired(f"session 0x{session_id:x} expired on {self.name}")
        session.last_heard = _now()

    def end_session(self, session_id: int) -> None:
        """The session closed or expired: its ephemerals go, with their notifications."""
        if self.sessions.pop(session_id, None) is not None:
            self.publish(self.tree.delete_owned_by(session_id))

    def expire(self, session_id: int) -> None:
        """Expire ``session_id`` now (a fault the simulator injects)."""
        self.end_session(session_id)

    def expire_due(self) -> None:
        """Expire every session not heard from for its timeout."""
        now = _now()
        for session in [s for s in self.sessions.values() if now - s.last_heard > s.timeout]:
            self.end_session(session.id)

    # ---- calls ----------------------------------------------------------------------------------

    def fault_for(self, store: str, kind: str, path: str) -> CallFault:
        return self.faults.on_call(self.name, store, kind, path)

    def check_reachable(self, path: str | None) -> None:
        if self.unreachable:  # refused before anything is applied
            refused = StoreUnavailable(f"simulated store {self.name} unreachable", path)
            refused.write_may_have_happened = False
            raise refused

    # ---- notifications --------------------------------------------------------------------------

    def stream_of(self, path: str) -> int:
        """The notification stream of ``path`` (a stable hash, the same in every process)."""
        return zlib.crc32(path.encode()) % self.streams if self.streams > 1 else 0

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber) if subscriber in self._subscribers else None

    def publish(self, notifications: list[Notification]) -> None:
        for subscriber in list(self._subscribers):
            for notification in notifications:
                subscriber(notification)


def _now() -> float:
    return asyncio.get_running_loop().time()
