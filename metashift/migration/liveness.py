"""Judging by heartbeats who is alive: participants (their records) and the coordinator (the
leader node), each rewritten by its owner every quarter of its timeout.

An observer notes, by its own monotonic clock, when it first saw each node's current version (or
heard it change). A node whose version has not changed for its timeout since then is dead. The
owner's write was sent before the observer saw it, so the observer never judges a node dead
sooner than ``timeout`` after its owner's last heartbeat left it; the owner, for its part, stops
acknowledging writes once ``LEASE_SHARE`` of the timeout has passed since it sent its last good
heartbeat (``agent.heartbeat``). A break in what the observer hears (a lost connection) makes it
start again from now: it may have missed a heartbeat, never the other way round.
"""

from __future__ import annotations

import time

#: Of a timeout, how long an owner counts itself alive after sending a heartbeat that succeeded;
#: the rest is margin for clocks that run at slightly different rates and for scheduling.
LEASE_SHARE = 0.8
#: Heartbeats per timeout.
BEATS_PER_TIMEOUT = 4


class Liveness:
    """One observer's view of when each node last changed."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, float]] = {}

    def observe(self, path: str, version: int) -> float:
        """Note ``path`` at ``version`` (read now); returns the seconds since it last changed."""
        now = time.monotonic()
        known = self._seen.get(path)
        if known is None or known[0] != version:
            self._seen[path] = (version, now)
            return 0.0
        return now - known[1]

    def touched(self, path: str) -> None:
        """``path`` changed just now (a notification): its owner was alive a moment ago."""
        known = self._seen.get(path)
        self._seen[path] = (known[0] if known is not None else -1, time.monotonic())

    def age(self, path: str) -> float:
        known = self._seen.get(path)
        return time.monotonic() - known[1] if known is not None else 0.0

    def forget(self, path: str) -> None:
        self._seen.pop(path, None)

    def keep_only(self, live_paths: set[str]) -> None:
        for path in [p for p in self._seen if p not in live_paths]:
            del self._seen[path]

    def restart(self) -> None:
        """Heartbeats may have been missed (a broken stream): every age starts again from now."""
        now = time.monotonic()
        self._seen = {path: (version, now) for path, (version, _) in self._seen.items()}
