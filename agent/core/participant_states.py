"""The participant's states and the legal moves between them, listed once: where it stands in a
migration's freeze (``FreezeState``) and with its heartbeat lease (``LeaseState``), two axes that
move apart (a lease can lapse inside a freeze). A move a table does not list raises
``ParticipantStateError``, as the write gate's do (``gate_states``)."""

from __future__ import annotations

import enum
from typing import TypeVar


class FreezeState(enum.Enum):
    """Where the participant stands in a migration's freeze."""

    FOLLOWING = "following"
    """No freeze held here: the flag is followed, and the gate is not closed for a migration."""
    FROZEN = "frozen"
    """The gate is closed for the freeze of an epoch (held writes wait); the target may be open,
    its members' ephemerals are not all re-created there yet."""
    PREPARED = "prepared"
    """The freeze of an epoch is done here: every ephemeral re-created in the target, value and
    version, and the floors in place; the epoch is acknowledged (or about to be)."""


class LeaseState(enum.Enum):
    """Where the participant stands with its heartbeat lease on its home store."""

    HELD = "held"
    """Heartbeats get through: writes may be acknowledged."""
    LAPSED = "lapsed"
    """No heartbeat got through for most of ``participant_timeout``: no write is acknowledged,
    and the gate is closed next (a coordinator may have gone on without this agent)."""
    FENCED = "fenced"
    """The gate is closed for the lapse: until a heartbeat gets through and the flag is read after it."""
    RENEWED = "renewed"
    """A heartbeat got through and the flag was read after it: the fence goes once no freeze
    holds the gate."""


_F, _L = FreezeState, LeaseState
#: Every legal move of the freeze state (a state's own name: done again, as a retried step does).
FREEZE_MOVES: dict[FreezeState, frozenset[FreezeState]] = {
    _F.FOLLOWING: frozenset({_F.FOLLOWING, _F.FROZEN}),
    # FOLLOWING: rolled back (FAILED, a new migration, the flag removed)
    _F.FROZEN: frozenset({_F.FROZEN, _F.PREPARED, _F.FOLLOWING}),
    # FROZEN: the freeze of another epoch (one that never ended here); FOLLOWING: switched or rolled back
    _F.PREPARED: frozenset({_F.PREPARED, _F.FROZEN, _F.FOLLOWING}),
}
#: Every legal move of the lease state.
LEASE_MOVES: dict[LeaseState, frozenset[LeaseState]] = {
    _L.HELD: frozenset({_L.LAPSED}),
    _L.LAPSED: frozenset({_L.FENCED}),
    # LAPSED: the gate opened by a switch or a rollback while the lease was out: fenced again next
    _L.FENCED: frozenset({_L.RENEWED, _L.LAPSED}),
    _L.RENEWED: frozenset({_L.HELD, _L.LAPSED}),
}
#: Lease states in which writes to the home may be acknowledged (with a fresh registration).
LEASE_OK = frozenset({_L.HELD, _L.RENEWED})
#: Lease states that wait for a heartbeat to get through.
LEASE_OUT = frozenset({_L.LAPSED, _L.FENCED})

S = TypeVar("S", FreezeState, LeaseState)


class ParticipantStateError(RuntimeError):
    """A move of the participant's state that its table does not allow (a bug in whoever drives it)."""

    def __init__(self, old: enum.Enum, new: enum.Enum, allowed: frozenset[enum.Enum]) -> None:
        self.old, self.new = old, new
        listed = ", ".join(sorted(s.name for s in allowed))
        super().__init__(f"participant: illegal move {old.name} -> {new.name} (from {old.name}: {listed})")


def check_move(old: S, new: S) -> S:
    """``new``, if the table of its kind allows the move from ``old``; else ``ParticipantStateError``."""
    allowed: frozenset[enum.Enum] = FREEZE_MOVES[old] if isinstance(old, FreezeState) else LEASE_MOVES[old]
    if new not in allowed:
        raise ParticipantStateError(old, new, allowed)
    return new
