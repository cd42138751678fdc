"""A Pulsar cluster's stores replicated as production runs them (``access.StoreSetup``): a
ZooKeeper ensemble of three (the source) and an Oxia cluster of a coordinator and three data
servers, replication factor 3, three shards (the target), started and removed by the cluster;
and a store's leader killed once a migration reaches a phase, the election after it measured, the
member started again later (``LeaderKiller``).

The agents and the ``metashift`` commands are given every member (``zk://h1,h2,h3``,
``oxia://h1,h2,h3/default``). Pulsar itself is not, on Oxia: its ``OxiaMetadataStoreProvider``
hands what follows ``oxia://`` (up to the namespace) to the Oxia Java client as its one
``serviceAddress``, a gRPC target resolved by DNS, and a list is not one (Pulsar 4.0.7, Oxia's
client 0.6.2: ``Invalid DNS name: h1:p,h2:p,h3:p`` at the start; Pulsar 4.2.4, client 0.9.4:
"Failed receiving shard assignments", retried for ever: the member never starts). That address
only bootstraps the client: it streams the shard assignments from it and reaches each shard's
leader at the address the assignments name. So a member natively on Oxia names one address
that reaches a data server (in production a name resolving to every data server, as the Helm
chart's headless service ``<release>-oxia-svc``); on loopback, where every server is
``127.0.0.1`` on its own port, one data server (``cluster.pulsar_oxia_address``).
docs/operator-guide.md, "Pulsar's members on replicated stores".
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metashift.migration.flag import MigrationFlag, read_flag
from metashift.stores import MetadataStoreError, open_store
from metashift_lab.agents import log_entries
from metashift_lab.replicated import OxiaCluster, ReplicatedStore, ZooKeeperEnsemble

from .access import MemberAccess, Server
from .restarts import at_phase

#: An agent's log line of a phase it saw: the phase and the epoch.
_PHASE_LINE = re.compile(r"^migration phase ([A-Z_]+) \(epoch (\d+)\)$")
#: How early an agent's gate may close before its log says PREPARATION (both on the same
#: notification, logged in either order).
_CLOSE_EARLY_S = 1.0


class ReplicatedPulsarStores:
    """``access.StoreSetup``: a ZooKeeper ensemble (``zk``) and an Oxia cluster (``oxia``) of three
    members each, made in ``directory``; the cluster starts and removes them. The members carry
    nothing besides their URL."""

    def __init__(self, directory: Path) -> None:
        self.zookeeper = ZooKeeperEnsemble(directory / "zookeeper")
        self.oxia = OxiaCluster(directory / "oxia")
        self.servers: dict[str, Server] = {"zk": self.zookeeper, "oxia": self.oxia}
        self.members: Mapping[str, MemberAccess] = {}
        self.zookeeper_settings: Mapping[str, Any] = {}
        self.target_settings: Mapping[str, Any] = {}

    def url(self, kind: str) -> str:
        """metashift's URL of the store ``kind``, every member in it."""
        if kind == "zk":
            return self.zookeeper.url
        if kind == "oxia":
            return self.oxia.url
        raise ValueError(f"no {kind} store here")


@dataclass
class LeaderLoss:
    """A store's leader SIGKILLed in a migration's phase, the election after it, and the member's
    restart."""

    store: str
    """``zk`` or ``oxia``."""
    path: str
    """Whose leader (Oxia: the leader of the shard holding this path's key)."""
    phase: str
    """The phase in force at the kill (where it landed): the flag's right after it, unless that
    phase was written after the kill (a FAILED the kill itself brought about), then the one read
    just before it."""
    lost: int
    elected: int
    election_s: float
    """From the kill until another member led and every running member served."""
    killed_at: float
    """Wall clock of the kill."""
    restart_s: float | None = None
    """How long the lost member took to start again and serve (``None``: not restarted yet)."""

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "path": self.path, "phase": self.phase, "lost": self.lost,
                "elected": self.elected, "election_s": round(self.election_s, 2),
                "restart_s": None if self.restart_s is None else round(self.restart_s, 2)}  # fmt: skip


class LeaderKiller:
    """Kills a replicated store's leader once a migration reaches a phase, and starts the member
    again. Members are killed, waited for and started in one thread of its own per store that
    lives until ``close``: a member dies with the thread that started it (``processes``'
    PR_SET_PDEATHSIG), and no kill nor restart blocks the event loop (a freeze of a second is
    caught on the flag's notification)."""

    def __init__(self, stores: Mapping[str, ReplicatedStore], source_url: str) -> None:
        self.stores = dict(stores)
        self.source_url = source_url
        self._threads = {kind: ThreadPoolExecutor(1, thread_name_prefix=f"members-{kind}") for kind in self.stores}
        self.losses: list[LeaderLoss] = []

    async def in_phase(self, kind: str, phases: Collection[str], *, path: str = "/", started_after_ms: int,
                       delay: float = 0.0, within: float = 900.0) -> LeaderLoss | str:  # fmt: skip
        """Kill the leader of ``kind`` (of ``path``'s shard) once the migration started at or after
        ``started_after_ms`` is in one of ``phases`` (``delay`` seconds after it was seen there),
        and wait for the next one: the loss; or ``"missed (PHASE)"`` when the migration ended
        first."""
        landed = await at_phase(self.source_url, phases, started_after_ms=started_after_ms, within=within)
        if landed not in phases:
            return f"missed ({landed})"
        if delay:
            await asyncio.sleep(delay)
        store = self.stores[kind]
        loop = asyncio.get_running_loop()
        before = await self._flag_now()
        killed_at = time.time()
        started = time.monotonic()
        lost = await loop.run_in_executor(self._threads[kind], store.kill_leader, path)
        # where the kill landed: the flag right after it (a kill aimed at a short phase may land in
        # the next one), unless its phase was written after the kill: then the kill's consequence
        # (the coordinator failing the migration on its broken watch, which a loaded machine
        # writes before this read comes) and the kill landed in the phase read before it. The flag
        # is on the source, which may be the store just hit: bounded
        after = await self._flag_now()
        phase = phase_at_kill(killed_at, before, after)
        elected = await loop.run_in_executor(self._threads[kind], lambda: store.wait_leader(path, other_than=lost))
        loss = LeaderLoss(kind, path, phase, lost, elected, time.monotonic() - started, killed_at)
        self.losses.append(loss)
        return loss

    async def restart(self, loss: LeaderLoss) -> None:
        """Start the lost member again on its data, and return once it serves."""
        store = self.stores[loss.store]
        started = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(self._threads[loss.store], store.restart, loss.lost)
        loss.restart_s = time.monotonic() - started

    async def _flag_now(self) -> MigrationFlag | str:
        """The source's flag now, or why it could not be read."""
        try:
            store = await asyncio.wait_for(open_store(self.source_url, watch=False, create_root=False), 30.0)
            try:
                flag = await asyncio.wait_for(read_flag(store), 30.0)
            finally:
                await store.close()
        except (MetadataStoreError, TimeoutError) as e:
            return f"unknown ({e})"
        return flag if flag is not None else "unknown (no flag)"

    def close(self) -> None:
        """End the threads (call after the stores were stopped: a member started in one dies with it)."""
        for thread in self._threads.values():
            thread.shutdown(wait=True, cancel_futures=True)


def phase_at_kill(killed_at: float, before: MigrationFlag | str, after: MigrationFlag | str) -> str:
    """The phase in force at ``killed_at`` (wall clock, s) from the flag read before and after."""
    if isinstance(after, str):
        return before.phase.value if isinstance(before, MigrationFlag) else after
    if after.phase_since > killed_at * 1000 and isinstance(before, MigrationFlag) and before.epoch == after.epoch:
        return before.phase.value
    return after.phase.value


def epoch_freezes(logs: list[str]) -> dict[int, tuple[float, float]]:
    """Each migration's freeze (wall clock, by epoch) from the agents' JSON logs: from the first
    write gate closed at its PREPARATION (on any agent) to the last one opened again after it (its
    COMPLETED or FAILED). Gates a lapsed heartbeat closes outside a migration's freeze are not
    the migration's: ``agents.freeze_window`` spans every gate ever closed."""
    closed: dict[int, float] = {}
    opened: dict[int, float] = {}
    for text in logs:
        entries = log_entries(text)
        for i, (ts, msg) in enumerate(entries):
            found = _PHASE_LINE.match(msg)
            if found is None or found.group(1) != "PREPARATION":
                continue
            epoch = int(found.group(2))
            start = next((t for t, m in entries if m.startswith("write gate closed") and t >= ts - _CLOSE_EARLY_S),
                         None)  # fmt: skip
            end = next((t for t, m in entries[i:] if m.startswith(("write gate open", "migration completed",
                                                                    "migration rolled back"))), None)  # fmt: skip
            if start is None or end is None:
                continue
            closed[epoch] = min(closed.get(epoch, start), start)
            opened[epoch] = max(opened.get(epoch, end), end)
    return {epoch: (closed[epoch], opened[epoch]) for epoch in sorted(closed)}


def released_into_source(text: str) -> bool:
    """An agent's log says a failed migration rolled back and its gate opened towards the source
    after it (its held writes went on there)."""
    entries = log_entries(text)
    back = next((i for i, (_, m) in enumerate(entries) if m.startswith("migration rolled back")), None)
    return back is not None and any(m.startswith("write gate open towards source") for _, m in entries[back - 1 :])
