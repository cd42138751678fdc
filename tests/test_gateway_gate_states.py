"""The write gate's state machine: one enum, one table of legal moves, every move checked. Each
state is reached through the gate's own calls, in front of a real ZooKeeper."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.gate_states import TRANSITIONS, GateState, GateStateError
from metashift.agent.core.router import Router
from metashift.proto.errors import HeldForMigration
from metashift.stores import MetadataStore
from tests.harness import eventually

S = GateState

#: The moves the participant and the agent may make, as documented in agent/core/gate.py and
#: listed in agent/core/gate_states.py.
EXPECTED = {
    (S.OPEN, S.OPEN), (S.OPEN, S.CLOSED), (S.OPEN, S.STOPPING),
    (S.CLOSED, S.CLOSED), (S.CLOSED, S.OPEN), (S.CLOSED, S.RELEASING), (S.CLOSED, S.STOPPED),
    (S.RELEASING, S.RELEASING), (S.RELEASING, S.OPEN), (S.RELEASING, S.CLOSED), (S.RELEASING, S.STOPPING),
    (S.STOPPING, S.STOPPING), (S.STOPPING, S.STOPPED),
    (S.STOPPED, S.STOPPED), (S.STOPPED, S.STOPPING),
}


class Reached:
    """A gate driven into a given state through its public calls; ``finish`` lets it go."""

    def __init__(self, gate: WriteGate) -> None:
        self.gate = gate
        self.release = asyncio.Event()
        self.tasks: list[asyncio.Task[Any]] = []

    async def finish(self) -> None:
        self.release.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@pytest.fixture
async def reach(zk_url: str, open_stores: Callable[..., Any]) -> AsyncIterator[Callable[..., Any]]:
    made: list[Reached] = []

    async def _reach(state: GateState) -> Reached:
        store: MetadataStore = await open_stores(zk_url)
        r = Reached(WriteGate(Router(store), hold_timeout=30))
        made.append(r)
        gate = r.gate
        if state is S.CLOSED:
            await gate.close(5)
        elif state is S.RELEASING:
            await gate.close(5)

            async def slow(store: MetadataStore) -> None:
                await r.release.wait()

            r.tasks.append(asyncio.create_task(gate.run(slow)))
            await eventually(lambda: gate.held == 1, what="the write is held")
            r.tasks.append(asyncio.create_task(gate.open()))
            # released, and the release waits for it to finish
            await eventually(lambda: gate.in_flight == 1, what="the held write is released")
        elif state is S.STOPPING:
            gate.shutdown()
        elif state is S.STOPPED:
            await gate.close(5)
            gate.shutdown()
        assert gate.state is state
        return r

    yield _reach
    for r in made:
        await r.finish()


def test_the_table_is_the_documented_one() -> None:
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == EXPECTED
    assert set(TRANSITIONS) == set(GateState)


@pytest.mark.parametrize(("old", "new"), list(itertools.product(GateState, GateState)), ids=lambda s: s.name)
async def test_every_move_is_checked_against_the_table(
    old: GateState, new: GateState, reach: Callable[..., Any]
) -> None:
    r = await reach(old)
    if (old, new) in EXPECTED:
        r.gate._move(new)
        assert r.gate.state is new
    else:
        with pytest.raises(GateStateError) as err:
            r.gate._move(new)
        assert r.gate.state is old  # an illegal move changes nothing
        assert f"illegal move {old.name} -> {new.name}" in str(err.value)
        assert (err.value.old, err.value.new) == (old, new)


@pytest.mark.parametrize("old", list(GateState), ids=lambda s: s.name)
@pytest.mark.parametrize("call", ["close", "open", "shutdown"])
async def test_public_calls_make_only_legal_moves_from_every_state(
    old: GateState, call: str, reach: Callable[..., Any]
) -> None:
    r = await reach(old)
    gate = r.gate
    expected = {
        "close": {S.OPEN: S.CLOSED, S.CLOSED: S.CLOSED, S.RELEASING: S.CLOSED, S.STOPPING: S.STOPPED,
                  S.STOPPED: S.STOPPED},
        "open": {S.OPEN: S.OPEN, S.CLOSED: S.OPEN, S.STOPPING: S.STOPPING, S.STOPPED: S.STOPPING},
        "shutdown": {S.OPEN: S.STOPPING, S.CLOSED: S.STOPPED, S.RELEASING: S.STOPPING, S.STOPPING: S.STOPPING,
                     S.STOPPED: S.STOPPED},
    }[call]
    if call == "close":
        close = asyncio.create_task(gate.close(30))
        await asyncio.sleep(0)
        assert gate.state is expected[old]
        r.release.set()  # the write in flight (RELEASING) ends: the close has drained it
        await close
    elif call == "open":
        if old is S.RELEASING:  # joins the release under way: still releasing until the write ends
            joined = asyncio.create_task(gate.open())
            await asyncio.sleep(0)
            assert gate.state is S.RELEASING
            r.release.set()
            assert await joined == 1
            assert gate.state is S.OPEN
            return
        assert await gate.open() == 0
    else:
        gate.shutdown()
    assert gate.state is expected[old]


async def test_shut_down_gate_fails_writes_that_would_wait_and_lets_others_flow(
    zk_url: str, open_stores: Callable[..., Any]
) -> None:
    store: MetadataStore = await open_stores(zk_url)
    gate = WriteGate(Router(store), hold_timeout=30)
    await gate.close(5)
    gate.shutdown()
    assert gate.state is S.STOPPED and not gate.is_open
    with pytest.raises(HeldForMigration) as err:
        await gate.run(lambda s: s.put("/never", b"x"))
    assert not err.value.write_may_have_happened
    assert not await store.exists("/never")
    await gate.open()  # the agent stops with the gate open again: writes flow, none waits
    assert gate.state is S.STOPPING and gate.is_open
    stat = await gate.run(lambda s: s.put("/flows", b"y"))
    assert stat.version == 0
