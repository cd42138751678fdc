"""The sandbox's settings, from its command line, and its progress lines on stderr: what every
kind of sandbox run shares (``run``, ``chaos``, ``pulsar_run``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from metashift.migration.phase import Phase


@dataclass
class Options:
    """The sandbox's settings, from its command line."""

    topics: int = 2000
    brokers: int = 3
    bookies: int = 2
    clients_per_agent: int = 2
    json: bool = False
    warmup: float = 2.0
    """Seconds of writes before the migration starts."""
    after: float = 3.0
    """Seconds of writes after COMPLETED (or FAILED)."""
    hold_timeout: float = 300.0
    prepare_timeout: float = 60.0
    spark_master: str | None = None
    kill_agent_at: str | None = None
    """A phase name: SIGKILL an agent process as soon as the migration is in it."""
    kill_agent: str = "coordinator"
    """Which agent ``kill_agent_at`` kills: the ``coordinator`` or a ``participant`` (not the coordinator)."""
    keep: bool = False
    """Keep the work directory (logs, configs) instead of removing it."""
    pulsar: bool = False
    """A real Pulsar cluster (bookie, brokers, producers, consumers) instead of simulated clients."""
    beside_copy: bool = False
    """After the migration: ``metashift copy --verify`` of the same tree, timed beside it (``beside_copy``)."""
    client_protocol: str = "grpc"
    """How the simulated clients reach their agents: ``grpc`` (``metashift.client``) or
    ``zookeeper`` (ZooKeeper's protocol on each agent's ZooKeeper front, as stock brokers and
    bookies do)."""
    abort_first: bool = False
    """With ``pulsar``: a first migration aborted mid-way (FAILED, Pulsar carries on on ZooKeeper),
    then the migration."""
    source: str = "zk"
    """The store kind the cluster starts on (``zk``, ``etcd``, ``oxia``)."""
    target: str = "etcd"
    """The store kind it migrates into."""
    adopt: bool = False
    """With ``pulsar``: the cluster starts on the source store directly and adopts its agents by a
    rolling restart, ``migrate check`` before and after each step (always so on an etcd source)."""
    pulsar_version: str | None = None
    """With ``pulsar``: the release to run (``metashift_lab.pulsar_cluster.release.RELEASES``; the LTS
    line's by default)."""
    replicas: int = 1
    """Members of each store: 1 (a single server), or an odd number above (a ZooKeeper ensemble, an
    etcd cluster, an Oxia cluster of that many data servers)."""
    forget: str | None = None
    """With ``adopt``: the member left on the store at first (named by the check, refused by
    ``start``, failing ``start --force``), restarted onto its agent after."""


def say(text: str) -> None:
    print(f"sandbox: {text}", file=sys.stderr, flush=True)


def generate_progress(store_name: str) -> Any:
    """A progress callback of ``generate``: a line at each tenth of the tree."""
    shown = [-1]

    def on_progress(done: int, total: int) -> None:
        tenth = done * 10 // max(total, 1)
        if tenth != shown[0]:
            shown[0] = tenth
            say(f"generating the Pulsar tree on {store_name}: {done}/{total} nodes")

    return on_progress


def progress_line(status: dict[str, Any]) -> str:
    """The line that says where the migration stands (``migrate status``'s dict)."""
    phase = status["phase"]
    if phase == Phase.PREPARATION.value:
        acked = sum(1 for p in status["participants"] if p["acknowledged"])
        return f"{phase}: {acked}/{len(status['participants'])} agents acknowledged (writes held)"
    if phase == Phase.COPYING.value:
        copy = status.get("copy") or {}
        return f"{phase}: {copy.get('stage') or 'starting Spark'} {copy.get('done') or 0}/{copy.get('total') or '?'}"
    return phase
