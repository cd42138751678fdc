"""A whole migration with a fault, its clients' history checked, not only its final state: the
chaos run's sandbox (``metashift/sandbox/chaos.py``: agents as processes, writers, register
clients on ``metashift.client`` and on kazoo through each agent's ``--zk-listen``) with a
participant's agent killed by SIGKILL while the coordinator copies. Every operation is recorded
(invoke, response or unknown outcome), every register is read at the end where the cluster lives,
and the history must be linearizable; the same history with an acknowledged write lost, or with a
read made stale, must not be."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from metashift.migration.phase import Phase
from metashift_lab.linearizability.checker import check
from metashift_lab.sandbox.chaos import ChaosSandbox
from metashift_lab.sandbox.faults import FaultPlan
from metashift_lab.sandbox.history import CAS, CREATE, OK, READ, UNKNOWN, UPDATE, WRITE, Operation
from metashift_lab.sandbox.options import Options

pytestmark = pytest.mark.timeout(1200)

WRITES = (WRITE, UPDATE, CAS, CREATE)


def _acked_writes(ops: list[Operation], key: str) -> list[Operation]:
    return sorted((o for o in ops if o.key == key and o.f in WRITES and o.status == OK and o.version is not None
                   and o.complete is not None), key=lambda o: o.complete or 0)  # fmt: skip


def _lose_the_last_write(ops: list[Operation]) -> list[Operation] | None:
    """The final read of some key answers the write before the last one acknowledged: the last
    acknowledged write is lost."""
    broken = copy.deepcopy(ops)
    for final in (o for o in broken if o.process == "final-read" and o.found):
        writes = _acked_writes(broken, final.key)
        last = next((w for w in reversed(writes) if w.value == final.read), None)
        earlier = [w for w in writes if last is not None and (w.complete or 0) < last.invoke and w.value != final.read]
        if last is not None and earlier:
            final.read, final.version = earlier[-1].value, earlier[-1].version
            return broken
    return None


def _make_a_read_stale(ops: list[Operation]) -> list[Operation] | None:
    """A read answers a value that a write acknowledged before the read began had replaced."""
    broken = copy.deepcopy(ops)
    for read in (o for o in broken if o.f == READ and o.status == OK and o.found and o.process != "final-read"):
        writes = _acked_writes(broken, read.key)
        source = next((w for w in writes if w.value == read.read), None)
        if source is None or (source.complete or 0) >= read.invoke:
            continue
        older = [w for w in writes if (w.complete or 0) < source.invoke and w.value != read.read]
        if older:
            read.read, read.version = older[-1].value, older[-1].version
            return broken
    return None


async def _migrate(plan: FaultPlan, *, topics: int, brokers: int, after: float) -> tuple[ChaosSandbox, Any, dict]:
    """One chaos-sandbox migration with ``plan``'s fault (one bookie, a client per agent); the
    sandbox (its history), its report and its row, everything cleaned up."""
    options = Options(topics=topics, brokers=brokers, bookies=1, clients_per_agent=1, hold_timeout=30.0,
                      warmup=2.0, after=after)  # fmt: skip
    sandbox = ChaosSandbox(options, plan)
    try:
        report = await sandbox.run()
        row = sandbox.row()
    finally:
        await sandbox.cleanup()
    return sandbox, report, row


async def test_a_migration_with_a_participant_killed_keeps_every_history_linearizable() -> None:
    plan = FaultPlan.draw(7, fault="kill-agent", phase=Phase.SYNCING.value)
    sandbox, report, row = await _migrate(plan, topics=10, brokers=1, after=3.0)
    assert row["landed"] == Phase.SYNCING.value and row["victim"], row
    assert report.phase == Phase.COMPLETED.value, (report.reason, row)
    assert report.writes_lost == 0, report.lost
    assert report.coordinator_verified
    ops = sandbox.history.ops
    # both protocols, every agent's clients, and the final word of each register
    assert {o.process for o in ops} >= {f"{a.node_id}-{kind}" for a in sandbox.agents for kind in "gz"}
    assert sum(1 for o in ops if o.process.endswith("-z") and o.status == OK) > 50
    assert sum(1 for o in ops if o.process.endswith("-g") and o.status == OK) > 50
    finals = [o for o in ops if o.process == "final-read"]
    assert sorted(o.key for o in finals) == sorted(sandbox.register_keys) and all(o.status == OK for o in finals)
    # the killed agent's clients stopped with something in flight, or nothing: never "pending"
    assert all(o.status != "pending" for o in ops)
    assert {o.status for o in ops} <= {OK, "refused", "not-applied", UNKNOWN}
    verdict = check(ops)
    assert verdict.linearizable, verdict.describe()

    lost = _lose_the_last_write(ops)
    assert lost is not None, "no register was written twice"
    verdict = check(lost)
    assert not verdict.linearizable
    assert any(o.process == "final-read" for k in verdict.failures for o in k.window), verdict.describe()
    stale = _make_a_read_stale(ops)
    assert stale is not None, "no read to make stale"
    assert not check(stale).linearizable


async def test_a_coordinator_paused_in_copying_writes_nothing_into_the_target_when_it_resumes() -> None:
    """The chaos run's seed 26: the coordinator's agent stopped by SIGSTOP just as COPYING began,
    for longer than ``participant_timeout``. A new leader carried the delta and completed, clients
    wrote into the target; the old one then resumed its carry, read the target ahead of the frozen
    source, and "restored" the source's old values over the clients' writes (registers read back
    absent, or at version 1). Its leader lease had run out: it must write nothing more. The freeze's
    delta goes through a Spark pass here, so that COPYING lasts seconds and the stop lands in it on
    a machine however loaded (a store-layer COPYING lasts ~50 ms); the paused leader's Spark copy
    must end with its lease too, and its carry after it is fenced as before."""
    plan = FaultPlan(seed=26, fault="stop-coordinator", phase=Phase.COPYING.value, delay=0.01, duration=8.0,
                     victim=58, spark_in_freeze=True)  # fmt: skip
    sandbox, report, row = await _migrate(plan, topics=20, brokers=2, after=12.0)
    assert row["fault_error"] == "" and row["victim"], row
    assert report.phase == Phase.COMPLETED.value, (report.reason, row)
    assert report.writes_lost == 0, report.lost
    ops = sandbox.history.ops
    assert sum(1 for o in ops if o.status == OK and o.f in WRITES) > 50
    verdict = check(ops)
    assert verdict.linearizable, verdict.describe()
