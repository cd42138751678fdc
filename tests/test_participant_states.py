"""The participant's states (``agent/core/participant_states.py``): every state has its moves
listed, and a move the tables do not list raises, naming it."""

from __future__ import annotations

import pytest

from metashift.agent.core.participant_states import (
    FREEZE_MOVES,
    LEASE_MOVES,
    FreezeState,
    LeaseState,
    ParticipantStateError,
    check_move,
)


def test_every_state_has_its_moves_listed() -> None:
    assert set(FREEZE_MOVES) == set(FreezeState)
    assert set(LEASE_MOVES) == set(LeaseState)
    # a freeze can always end (switch, rollback); a lapsed lease is always fenced before it renews
    assert all(FreezeState.FOLLOWING in moves for moves in FREEZE_MOVES.values())
    assert LEASE_MOVES[LeaseState.LAPSED] == {LeaseState.FENCED}


@pytest.mark.parametrize(("old", "new"), [
    (FreezeState.FOLLOWING, FreezeState.PREPARED),  # prepared without closing the gate first
    (LeaseState.HELD, LeaseState.FENCED),
    (LeaseState.LAPSED, LeaseState.HELD),  # writes acknowledged again without a heartbeat through
    (LeaseState.FENCED, LeaseState.HELD),  # nor without the flag read after one
])  # fmt: skip
def test_a_move_not_listed_raises(old: FreezeState | LeaseState, new: FreezeState | LeaseState) -> None:
    with pytest.raises(ParticipantStateError, match=f"illegal move {old.name} -> {new.name}"):
        check_move(old, new)  # type: ignore[type-var]


def test_the_listed_moves_pass() -> None:
    for table in (FREEZE_MOVES, LEASE_MOVES):
        for old, moves in table.items():
            for new in moves:
                assert check_move(old, new) is new  # type: ignore[type-var]
