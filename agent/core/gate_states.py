"""The write gate's states and the legal moves between them, listed once (``TRANSITIONS``): a move
it does not list raises ``GateStateError``."""

from __future__ import annotations

import enum


class GateState(enum.Enum):
    """Where the write gate stands."""

    OPEN = "open"
    """Writes flow to the active store."""
    CLOSED = "closed"
    """New writes wait in line (held); ``close`` drains the writes in flight."""
    RELEASING = "releasing"
    """Reopened: the held writes go out one at a time in arrival order; new ones queue behind."""
    STOPPING = "stopping"
    """The agent is going away with the gate open: writes flow, but none may wait."""
    STOPPED = "stopped"
    """The agent is going away with the gate closed: every write fails at once (nothing written)."""


_S = GateState
#: Every legal move of the gate, listed once (a state's own name: the call leaves it as it is).
TRANSITIONS: dict[GateState, frozenset[GateState]] = {
    _S.OPEN: frozenset({_S.OPEN, _S.CLOSED, _S.STOPPING}),
    _S.CLOSED: frozenset({_S.CLOSED, _S.OPEN, _S.RELEASING, _S.STOPPED}),
    _S.RELEASING: frozenset({_S.RELEASING, _S.OPEN, _S.CLOSED, _S.STOPPING}),
    _S.STOPPING: frozenset({_S.STOPPING, _S.STOPPED}),
    _S.STOPPED: frozenset({_S.STOPPED, _S.STOPPING}),
}
#: States in which a write goes straight to the store (when no held write is ahead of it).
FLOWING = frozenset({_S.OPEN, _S.STOPPING})
#: States in which a read goes to the store (releasing: the router already points where the held
#: writes go, and a read may be ordered before the writes not yet answered).
READABLE = frozenset({_S.OPEN, _S.RELEASING, _S.STOPPING})
#: States of an agent that is going away.
SHUTTING_DOWN = frozenset({_S.STOPPING, _S.STOPPED})


class GateStateError(RuntimeError):
    """A move of the write gate that ``TRANSITIONS`` does not allow (a bug in whoever drives it)."""

    def __init__(self, old: GateState, new: GateState) -> None:
        self.old, self.new = old, new
        allowed = ", ".join(sorted(s.name for s in TRANSITIONS[old]))
        super().__init__(f"write gate: illegal move {old.name} -> {new.name} (from {old.name}: {allowed})")


def check_move(old: GateState, new: GateState) -> GateState:
    """``new``, if ``TRANSITIONS`` allows the move from ``old``; else ``GateStateError``."""
    if new not in TRANSITIONS[old]:
        raise GateStateError(old, new)
    return new
