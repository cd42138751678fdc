"""The chaos run's fault plans: a seed of single servers draws what it drew before the faults of
replicated stores came (so a seed in an older table replays the same run), and only replicated
stores (``replicas`` > 1) draw or take a leader's kill or an agent cut off."""

from __future__ import annotations

import pytest

from metashift_lab.sandbox.faults import FAULTS, REPLICATED, FaultPlan


def test_single_server_seeds_draw_the_plans_they_drew_before() -> None:
    # plans of seeds named in docs/benchmarks.md and the tests, as the draw made them before
    # REPLICATED existed (victim, delay and duration come from the same generator after the fault)
    assert FaultPlan.draw(1) == FaultPlan(1, "stop-agent", "COPYING", 0.042, 6.35, 261)
    assert FaultPlan.draw(17) == FaultPlan(17, "reverse", "PREPARATION", 0.081, 0.0, 296)
    assert FaultPlan.draw(26) == FaultPlan(26, "stop-coordinator", "COPYING", 0.01, 5.21, 58)
    assert FaultPlan.draw(723) == FaultPlan(723, "reverse", "SYNCING", 1.635, 0.0, 260)
    assert {FaultPlan.draw(seed).fault for seed in range(1, 501)} == set(FAULTS[1:])


def test_replicated_stores_draw_leader_kills_and_partitions_too() -> None:
    drawn = [FaultPlan.draw(seed, replicas=3) for seed in range(1, 301)]
    faults = {plan.fault for plan in drawn}
    assert faults >= set(REPLICATED) and faults & set(FAULTS[1:]), faults
    assert all(plan.replicas == 3 for plan in drawn)
    # the same seed, the same plan
    assert FaultPlan.draw(42, replicas=3) == FaultPlan.draw(42, replicas=3)
    kill = FaultPlan.draw(5, "kill-target-leader", "SYNCING", replicas=3)
    assert (kill.fault, kill.phase, kill.replicas) == ("kill-target-leader", "SYNCING", 3)
    assert 0.0 <= kill.duration <= 8.0


@pytest.mark.parametrize("fault", REPLICATED)
def test_a_replicated_stores_fault_is_refused_on_single_servers(fault: str) -> None:
    with pytest.raises(ValueError, match="--replicas"):
        FaultPlan.draw(1, fault)
