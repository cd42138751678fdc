"""The migration's phases and the one table of legal moves between them, checked on every move."""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    """Where a migration stands, as recorded in the flag (``phase`` in its JSON)."""

    NOT_STARTED = "NOT_STARTED"
    SYNCING = "SYNCING"
    """Online pre-copy: writes flow while the coordinator copies and follows the changes."""
    PREPARATION = "PREPARATION"
    COPYING = "COPYING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

    @property
    def frozen(self) -> bool:
        """Agents hold their node's writes in this phase."""
        return self in (Phase.PREPARATION, Phase.COPYING)

    @property
    def in_progress(self) -> bool:
        """A migration runs: a new ``start`` is refused, ``abort`` is allowed."""
        return self in (Phase.SYNCING, Phase.PREPARATION, Phase.COPYING)

    @property
    def final(self) -> bool:
        return self in (Phase.COMPLETED, Phase.FAILED)


#: Every legal move, listed once. FAILED is reachable from every phase before COMPLETED;
#: COMPLETED is the end (a way back is a new migration in the other direction); a new start
#: leaves FAILED (or NOT_STARTED) for SYNCING with a new epoch.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.NOT_STARTED: frozenset({Phase.SYNCING}),
    Phase.SYNCING: frozenset({Phase.PREPARATION, Phase.FAILED}),
    Phase.PREPARATION: frozenset({Phase.COPYING, Phase.FAILED}),
    Phase.COPYING: frozenset({Phase.COMPLETED, Phase.FAILED}),
    Phase.COMPLETED: frozenset(),
    Phase.FAILED: frozenset({Phase.SYNCING}),
}


class IllegalTransition(ValueError):
    """A phase move the table does not allow."""

    def __init__(self, old: Phase, new: Phase) -> None:
        allowed = ", ".join(p.value for p in sorted(TRANSITIONS[old], key=lambda p: p.value)) or "none"
        super().__init__(f"cannot move a migration from {old.value} to {new.value} (allowed: {allowed})")
        self.old = old
        self.new = new


def check_transition(old: Phase, new: Phase) -> None:
    """Raise ``IllegalTransition`` unless ``old`` → ``new`` is in the table."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(old, new)
