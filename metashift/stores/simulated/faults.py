"""What the simulator does to one call of a simulated store (``CallFault``), decided per call by
a ``FaultPlan``. The plan sees which server, which store (its session), which kind of call and
which path, so a seeded plan can fault exactly the calls it chooses and replay them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CallFault:
    """One call's fate: delayed by ``delay`` seconds (loop time), then refused without being
    applied (``refuse``), or applied with its answer lost (``lose_answer``: the caller is told the
    outcome is unknown), or applied and answered."""

    delay: float = 0.0
    refuse: bool = False
    lose_answer: bool = False


#: A call as it is meant to go.
NO_FAULT = CallFault()


class FaultPlan(Protocol):
    """Decides the fate of each call."""

    def on_call(self, server: str, store: str, kind: str, path: str) -> CallFault: ...


class NoFaults:
    """Every call goes as it is meant to."""

    def on_call(self, server: str, store: str, kind: str, path: str) -> CallFault:
        return NO_FAULT
