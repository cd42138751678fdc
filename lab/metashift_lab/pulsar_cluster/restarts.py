"""Agents restarted beside a running Pulsar cluster, and the members' view of it (issue 45).

``RestartWindow``: from its ``start`` to its ``finish``, what the members saw (``member_view``):
their logs over the window, their registration nodes polled all along through an agent that does
not restart, the traffic's failed publishes, failed admin calls and longest publish, and whether
``sub`` received every message acknowledged by the end. A window is held open past the old
sessions' timeouts (``watched_past``): the members' own ZooKeeper session timeout and the agent's
store session timeout, read from the configs the cluster wrote, after the last signal; what a
restart costs late (a registration deleted when the dead agent's store session expires) shows
only then.

``restart_in_phase``: an agent restarted once a migration reaches a phase (SYNCING, or inside the
freeze: PREPARATION or COPYING), on the flag's notification as the sandbox's fault injector does,
so that a freeze of a few hundred milliseconds is not missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Collection

from metashift.migration import paths
from metashift.migration.flag import read_flag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStoreError, open_store
from metashift.stores.aio import wait_event
from metashift_lab.agents import AgentRestart

from .cluster import PulsarCluster
from .member_view import MemberView, RegistrationWatch, read_member_log
from .scenario import MigrationRun

#: Seconds a window stays open past the old sessions' timeouts: a store expires a session within a
#: tick or two of its timeout, and the members then react (a broker sees the bookie's registration
#: deleted, the bookie registers again) within seconds.
MARGIN_S = 15.0
#: Bound for ``sub`` to receive what was acknowledged (a consumer reconnecting after a freeze).
RECEIVE_WITHIN_S = 120.0
#: How often a phase hook looks at the flag besides its notifications.
POLL_S = 0.25
#: Set (to anything but ``0``) to keep a restart test's work directory, every log and config in it.
KEEP_ENV = "METASHIFT_KEEP_PULSAR"


def registrations(cluster: PulsarCluster) -> dict[str, str]:
    """Every member's registration node (an ephemeral of the member's session) -> the member: the
    bookie's under ``/ledgers/available``, each broker's under ``/loadbalance/brokers``."""
    brokers = [n for n in cluster.names if n.startswith("broker")]
    return {f"/ledgers/available/127.0.0.1:{cluster.bookie_port}": "bookie-1",
            **{f"/loadbalance/brokers/127.0.0.1:{p.web}": n for p, n in zip(cluster.broker_ports, brokers,
                                                                             strict=True)}}  # fmt: skip


def registration_paths(cluster: PulsarCluster) -> list[str]:
    return list(registrations(cluster))


def old_session_timeout(cluster: PulsarCluster) -> float:
    """Seconds: the longest of the members' ZooKeeper session timeouts and their agents' store
    session timeouts (from the configs the cluster wrote)."""
    return max(max(cluster.member_session_timeout(n), cluster.agent_store_session_timeout(n)) for n in cluster.names)


def watched_past(cluster: PulsarCluster, restarts: list[AgentRestart]) -> float:
    """Wall clock until which a window is watched: the last signal, the old sessions' timeout and
    ``MARGIN_S``."""
    last = max((r.signalled_at for r in restarts), default=time.time())
    return last + old_session_timeout(cluster) + MARGIN_S


async def missing_registrations(cluster: PulsarCluster, via: str, within: float = 120.0) -> list[str]:
    """Wait until every registration node is there (read through ``via``'s agent); those still
    missing after ``within`` seconds."""
    from metashift.client import connect

    deadline = time.monotonic() + within
    async with connect(cluster.agent(via).address, timeout=5.0) as client:
        while True:
            missing = []
            for path in registration_paths(cluster):
                try:
                    if not await client.exists(path):
                        missing.append(path)
                except MetadataStoreError:
                    missing.append(path)
            if not missing or time.monotonic() > deadline:
                return missing
            await asyncio.sleep(0.5)


async def publishes_flowing(run: MigrationRun, within: float = 300.0, oldest: float = 2.0) -> float:
    """Wait until no publish has waited longer than ``oldest`` seconds (a cluster calm again after
    an outage: what it held is answered); how long the oldest has waited then."""
    deadline = time.monotonic() + within
    while True:
        waited = run.traffic.in_flight()[1]
        if waited <= oldest or time.monotonic() > deadline:
            return waited
        await asyncio.sleep(0.5)


async def coordinator(cluster: PulsarCluster) -> str | None:
    """The node id of the agent that leads (stands as coordinator) now."""
    store = await open_store(cluster.source_url, watch=False, create_root=False)
    try:
        got = await store.get(paths.LEADER)
    finally:
        await store.close()
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return None if got is None else str(json.loads(got[0])["nodeId"])
    return None


class RestartWindow:
    """What the members saw from ``start`` to ``finish`` (the module's doc); registrations are
    read through the agent of ``via``, which must not be restarted meanwhile."""

    def __init__(self, run: MigrationRun, label: str, via: str) -> None:
        self.run = run
        self.cluster = run.cluster
        self.label = label
        self.via = via
        self.since = 0.0
        self._failures: Counter[str] = Counter()
        self._admin_errors = 0
        self._processes: dict[str, int | None] = {}
        self._watch: RegistrationWatch | None = None

    async def start(self) -> None:
        c = self.cluster
        self.since = time.time()
        self._failures = self.run.traffic.failures()
        self._admin_errors = len(self.run.admin_loop.errors)
        self._processes = {name: p.pid for name, p in c.processes.items()}
        self._watch = RegistrationWatch(c.agent(self.via).address, registration_paths(c))
        await self._watch.start()

    async def finish(self, restarts: list[AgentRestart], until: float | None = None) -> MemberView:
        """Wait until ``until`` (wall clock; ``watched_past`` the restarts by default), then read
        everything; ``sub`` gets ``RECEIVE_WITHIN_S`` to receive what was acknowledged by then."""
        c, traffic = self.cluster, self.run.traffic
        until = watched_past(c, restarts) if until is None else until
        await asyncio.sleep(max(0.0, until - time.time()))
        end = time.time()
        view = MemberView(self.label, self.since, end)
        assert self._watch is not None
        view.presence = await self._watch.stop()
        view.restarts = [{**r.to_dict(), "at_s": round(r.signalled_at - self.since, 1)} for r in restarts]
        for name in c.names:
            process = c.processes.get(name)
            if process is None:
                continue
            view.logs[name] = read_member_log(name, process.log_text(), self.since, end)
            if process.pid != self._processes.get(name) or not process.running:
                view.members_restarted.append(name)
        view.publishes_failed = traffic.failures() - self._failures
        view.admin_failed = self.run.admin_loop.errors[self._admin_errors :]
        view.longest_publish_ms = traffic.longest_publish_sent_ms(self.since, end)
        acknowledged = traffic.acknowledged_now()
        view.acknowledged = sum(len(p) for p in acknowledged.values())
        missing = await asyncio.to_thread(traffic.received_within, acknowledged, RECEIVE_WITHIN_S)
        view.not_received = sum(len(p) for p in missing.values())
        return view


async def at_phase(source_url: str, phases: Collection[str], *, started_after_ms: int, within: float) -> str:
    """Return once the migration started at or after ``started_after_ms`` (its flag's
    ``started_at``) is in one of ``phases``: that phase; or the phase it ended in (COMPLETED,
    FAILED) when it went by between two looks. ``TimeoutError`` after ``within`` seconds."""
    store = await open_store(source_url, create_root=False)
    moved = asyncio.Event()
    remove = store.add_listener(lambda n: moved.set() if n.path == paths.FLAG else None, under=paths.ROOT)
    deadline = time.monotonic() + within
    try:
        while True:
            moved.clear()
            try:
                flag = await read_flag(store)
            except MetadataStoreError:
                flag = None
            if flag is not None and flag.started_at >= started_after_ms:
                if flag.phase.value in phases or flag.phase in (Phase.COMPLETED, Phase.FAILED):
                    return flag.phase.value
            if time.monotonic() > deadline:
                raise TimeoutError(f"the migration did not reach {'/'.join(phases)} within {within:g}s")
            await wait_event(moved, POLL_S)
    finally:
        remove()
        await store.close()


async def restart_in_phase(
    cluster: PulsarCluster, name: str, kind: str, phases: Collection[str], *, started_after_ms: int,
    delay: float = 0.0, within: float = 900.0,
) -> tuple[str, AgentRestart | None]:  # fmt: skip
    """Restart the agent of ``name`` (``kind``: ``sigterm`` or ``sigkill``) once the migration is in
    one of ``phases`` (``delay`` seconds after it was seen there): the phase it came in and the
    restart, or ``("missed (COMPLETED)", None)`` when the migration ended first."""
    landed = await at_phase(cluster.source_url, phases, started_after_ms=started_after_ms, within=within)
    if landed not in phases:
        return f"missed ({landed})", None
    if delay:
        await asyncio.sleep(delay)
    cluster.say(f"{landed}: restarting the agent of {name} ({kind})")
    return landed, await cluster.restart_agent(name, kind)
