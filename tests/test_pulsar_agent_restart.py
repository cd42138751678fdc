"""An agent's restart costs its member nothing (issue 45), with a stock Pulsar 4.0.7: two brokers
and a bookie behind their agents (``PulsarCluster``: ZooKeeper the source, etcd the target), under
traffic (producers and consumers on persistent and partitioned topics, a namespace policy
updated every second), no migration at first.

One cluster goes through every case in turn (a cluster costs minutes of two cores to start):

- broker-1's agent restarted as ``systemctl restart`` does (SIGTERM, started again at once);
- broker-2's agent killed (SIGKILL) and started again 2 s later (systemd's ``Restart=``);
- the bookie's agent killed and started again 2 s later;
- a migration zk -> etcd (``metashift migrate start --wait``) with the agent of the broker that
  does not coordinate restarted (SIGTERM) in SYNCING and the bookie's agent killed inside the
  freeze (on the flag's notification of PREPARATION), started again 2 s later; it ends COMPLETED
  and every acknowledged message is read back from the ``backlog`` subscription. Every agent's
  ``participant_timeout`` is its store session's timeout, so that the freeze waits for the
  restart however slow the machine makes it (the default 5 s drops an agent that is not back in
  time, and its members' ephemerals are missing from the target until it is: the runbook).

Each case is watched past the old sessions' timeouts (the members' ZooKeeper session timeout and
the agents' store session timeout, read from the configs the cluster wrote: a registration held
by a dead agent's store session goes only when that session expires) and judged by what the
members saw (``member_view``): no session lost or expired and no new session, no bookie
unregistered (the brokers' ``Bookie ... deleted``, or its node absent from the store), no lock
lost, no bundle unloaded, no ``Not enough bookies``; no publish or admin call failed; every
acknowledged message received. Each case prints its figures (``FIGURES {json}``): the member's
view, how long each agent was away, the longest publish. No timing is asserted.

The bookie's agent does not stand for coordinator here (``candidates``), so that the restarts
inside a migration are a participant's, never a coordinator's takeover (which
``tests/test_migration_faults.py`` covers); load shedding is off, so that a bundle moves only
when something lost it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from metashift.stores import parse_url
from metashift_lab.agents import HAS_STATE_DIR
from metashift_lab.pulsar_cluster import PulsarCluster, PulsarNotInstalled, find_release
from metashift_lab.pulsar_cluster.cluster import AGENT
from metashift_lab.pulsar_cluster.member_view import MemberView
from metashift_lab.pulsar_cluster.restarts import (
    KEEP_ENV,
    RestartWindow,
    coordinator,
    missing_registrations,
    old_session_timeout,
    publishes_flowing,
    registrations,
    restart_in_phase,
)
from metashift_lab.pulsar_cluster.scenario import MigrationRun
from metashift_lab.pulsar_cluster.traffic import read_backlog
from tests.harness import require_part

# the cluster's start falls in the first case's time; each case then waits out the old sessions'
# timeouts (bounds, not speeds)
pytestmark = pytest.mark.timeout(1200)

VERSION = "4.0.7"
#: Seconds of traffic before the first case (every bundle gets its owner).
WARMUP_S = 10.0
#: Seconds into SYNCING before the agent restarts (the copy under way).
SYNCING_DELAY_S = 1.0
#: Seconds a registration an earlier case left missing may take to come back by itself before the
#: member is restarted for the next case.
HEAL_AFTER_S = 60.0
BROKERS = ("broker-1", "broker-2")
#: Keep the cluster's work directory (every log and config) after the run.
KEEP = os.environ.get(KEEP_ENV, "") not in ("", "0")


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} restart: {text}", file=sys.stderr, flush=True)


@dataclass
class Lab:
    cluster: PulsarCluster
    run: MigrationRun
    traffic_running: bool = False


@pytest.fixture(scope="module")
async def lab(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Lab]:
    try:
        release = find_release(VERSION)
    except PulsarNotInstalled as e:
        require_part(str(e))
    work_dir = tmp_path_factory.mktemp("pulsar-agent-restart")
    cluster = PulsarCluster(work_dir, release, source="zk", target="etcd", say=say, candidates=BROKERS,
                            broker_settings={"loadBalancerSheddingEnabled": False})  # fmt: skip
    session_timeout = max(parse_url(url).session_timeout for url in (cluster.source_url, cluster.target_url))
    for agent in cluster.agents:
        # a restart inside the freeze is waited for only while it is back within the agent's
        # participant_timeout (5 s by default): the signal, the 2 s down and the start, which on a
        # loaded machine took 12 s (the bookie dropped, its registration missing from the target
        # until it was back). As long as the store session lasts: past that its ephemerals are
        # gone anyway (the runbook's "an agent restarts inside a freeze")
        agent.coordinator_settings["participant_timeout"] = session_timeout
    run = MigrationRun(cluster, say)
    lab = Lab(cluster, run)
    try:
        await cluster.start()
        say(f"agents with a state directory of their own: {HAS_STATE_DIR}; old sessions' timeout "
            f"{old_session_timeout(cluster):g} s")  # fmt: skip
        await run.start_workload()
        lab.traffic_running = True
        await asyncio.sleep(WARMUP_S)
        say(f"bundles owned: {await run.bundle_owners()}")
        yield lab
    finally:
        if lab.traffic_running:  # a case failed before the traffic's end: nothing to wait for
            run.admin_loop.stop()
            await asyncio.to_thread(run.traffic.abandon)
        await cluster.cleanup(keep=KEEP)
        if KEEP:
            say(f"kept {work_dir}")


def judged(view: MemberView, **more: Any) -> list[str]:
    """Print the case's figures; what the members noticed."""
    figures = {**view.to_dict(), **more}
    print("FIGURES " + json.dumps(figures, default=str), flush=True)
    say(f"{view.label}: " + ("nothing noticed" if not view.problems() else "; ".join(view.problems()[:8])))
    return view.problems()


async def settled(lab: Lab, via: str) -> list[str]:
    """Every member running and registered before a case begins: an earlier case's damage is not
    this one's, so a member it left stopped, or unregistered for ``HEAL_AFTER_S``, is restarted
    (its Pulsar process, onto its agent) first; what was healed so (the case's notes)."""
    c = lab.cluster
    healed = []
    for name in [p.name for p in c.pulsar_processes if not p.running]:
        healed.append(f"{name} had stopped: started again before the case")
        await c.restart_member(name, AGENT)
    owners = registrations(c)
    for path in await missing_registrations(c, via, HEAL_AFTER_S):
        healed.append(f"{path} missing {HEAL_AFTER_S:g} s after the case before: {owners[path]} restarted")
        await c.restart_member(owners[path], AGENT)
    missing = await missing_registrations(c, via) if healed else []
    assert not missing, f"not registered before the case, even after a restart: {missing} ({healed})"
    for line in healed:
        say(f"healed: {line}")
    # what an outage held is answered before the window opens (its publishes are not this case's)
    waited = await publishes_flowing(lab.run)
    if waited > 2.0:
        healed.append(f"a publish had waited {waited:.0f} s when the case began")
    return healed


async def restart_case(lab: Lab, label: str, member: str, kind: str, via: str) -> MemberView:
    """Restart ``member``'s agent (``kind``) in a window watched past the old sessions' timeout,
    registrations read through ``via``'s agent."""
    healed = await settled(lab, via)
    window = RestartWindow(lab.run, label, via)
    await window.start()
    await asyncio.sleep(2.0)  # the window opens on a calm cluster
    restart = await lab.cluster.restart_agent(member, kind)
    view = await window.finish([restart])
    view.notes += healed
    return view


async def test_a_brokers_agent_restarted_by_sigterm_costs_the_broker_nothing(lab: Lab) -> None:
    view = await restart_case(lab, "broker-1's agent: SIGTERM, started again", "broker-1", "sigterm", via="broker-2")
    assert judged(view) == []


async def test_a_brokers_agent_killed_and_started_again_costs_the_broker_nothing(lab: Lab) -> None:
    view = await restart_case(lab, "broker-2's agent: SIGKILL, started again 2 s later", "broker-2", "sigkill",
                              via="broker-1")  # fmt: skip
    assert judged(view) == []


async def test_the_bookies_agent_killed_and_started_again_costs_the_bookie_nothing(lab: Lab) -> None:
    view = await restart_case(lab, "bookie-1's agent: SIGKILL, started again 2 s later", "bookie-1", "sigkill",
                              via="broker-1")  # fmt: skip
    assert judged(view) == []


async def test_restarts_in_syncing_and_inside_the_freeze_cost_the_members_nothing(lab: Lab) -> None:
    c, run = lab.cluster, lab.run
    leader = await coordinator(c)
    assert leader in BROKERS, leader
    syncing = next(n for n in BROKERS if n != leader)
    healed = await settled(lab, leader)
    window = RestartWindow(run, f"zk -> etcd: {syncing}'s agent SIGTERM in SYNCING, bookie-1's agent SIGKILL "
                                "inside the freeze", leader)  # fmt: skip
    await window.start()
    started_after = int(time.time() * 1000)
    hooks = [
        asyncio.create_task(restart_in_phase(c, syncing, "sigterm", ("SYNCING",), started_after_ms=started_after,
                                             delay=SYNCING_DELAY_S)),
        asyncio.create_task(restart_in_phase(c, "bookie-1", "sigkill", ("PREPARATION", "COPYING"),
                                             started_after_ms=started_after)),
    ]  # fmt: skip
    try:
        code = await run.migrate(change_topics=False)
        landed = await asyncio.wait_for(asyncio.gather(*hooks), 300)
    finally:
        for hook in hooks:
            hook.cancel()
    restarts = [r for _phase, r in landed if r is not None]
    view = await window.finish(restarts)
    view.notes += healed
    outcome = {"phase": run.phase, "reason": run.reason, "migrate_exit": code,
               "landed": [phase for phase, _r in landed],
               "freeze_s": None if run.freeze is None else round(run.freeze[1] - run.freeze[0], 2)}  # fmt: skip
    unregistered = [path for path, p in view.presence.items() if p.absent and p.absent[-1][1] is None]
    if unregistered:  # the traffic could not end: publishes wait for a bookie (their send timeout)
        pytest.fail(f"still unregistered at the window's end: {unregistered}; {judged(view, **outcome)}")
    # then the traffic stops (every publish answered, sub drained) and backlog gives every
    # acknowledged message back, from the ledgers made on ZooKeeper and on etcd alike
    await run.finish_traffic(0.0)
    lab.traffic_running = False
    acknowledged = run.traffic.acknowledged_now()
    read = await asyncio.to_thread(read_backlog, c.service_urls[1], list(acknowledged), acknowledged)
    unread = {t: len(p) - read.get(t, 0) for t, p in acknowledged.items() if read.get(t, 0) < len(p)}
    problems = judged(view, **outcome, messages=run.traffic.counts(), backlog_unread=unread)
    assert run.phase == "COMPLETED" and code == 0, outcome
    (in_syncing, _r), (in_freeze, _r) = landed
    assert in_syncing == "SYNCING" and in_freeze in ("PREPARATION", "COPYING"), outcome
    assert problems == []
    assert run.figures.messages_lost == 0 and run.figures.messages_failed == 0, run.traffic.counts()
    assert not unread, unread
