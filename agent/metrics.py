"""The agent's Prometheus metrics, in a registry of its own (several agents may share a process in
tests). Served on the ``metrics`` address when one is configured."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, start_http_server

PHASES = ["NOT_STARTED", "SYNCING", "PREPARATION", "COPYING", "COMPLETED", "FAILED"]

_HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class AgentMetrics:
    """The agent's Prometheus metrics; ``phase`` is driven by the migration participant."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "metashift_agent_requests", "Gateway calls by method and gRPC status", ["method", "status"], registry=r
        )
        self.latency = Histogram(
            "metashift_agent_request_seconds", "Gateway call latency by method", ["method"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.held_writes = Gauge("metashift_agent_held_writes", "Writes held by the closed write gate", registry=r)
        self.writes_held = Counter(
            "metashift_agent_writes_held", "Writes that had to wait at the write gate", registry=r
        )
        self.held_write_expired = Counter(
            "metashift_agent_held_writes_expired", "Held writes failed because their deadline came first", registry=r
        )
        self.drained_writes = Counter(
            "metashift_agent_drained_writes", "Writes in flight drained when the gate closed", registry=r
        )
        self.write_hold = Histogram(
            "metashift_agent_write_hold_seconds", "How long held writes waited at the closed write gate",
            buckets=_HOLD_BUCKETS, registry=r,
        )
        self.gate_open = Gauge("metashift_agent_write_gate_open", "1 when the write gate admits writes", registry=r)
        self.sessions = Gauge("metashift_agent_sessions", "Open client sessions", registry=r)
        self.watchers = Gauge("metashift_agent_watchers", "Open Watch streams", registry=r)
        self.ephemerals = Gauge("metashift_agent_ephemerals", "Ephemerals tracked for client sessions", registry=r)
        self.phase = Enum("metashift_agent_migration_phase", "Migration phase as this agent sees it",
                          states=PHASES, registry=r)
        self.active_store = Enum("metashift_agent_active_store", "Store that reads and writes go to",
                                 states=["source", "target"], registry=r)
        self.heartbeat_age = Gauge(
            "metashift_agent_heartbeat_age_seconds",
            "Seconds since this agent's last migration heartbeat got through to its home store", registry=r,
        )
        self.leader = Gauge("metashift_coordinator_leader", "1 while this agent's coordinator leads", registry=r)
        self.copy_done = Gauge("metashift_coordinator_copy_nodes_done",
                               "Nodes the leading coordinator's current pass has done", registry=r)
        self.copy_total = Gauge("metashift_coordinator_copy_nodes_total",
                                "Nodes of the leading coordinator's current pass (0: not counted yet)", registry=r)
        self.phase.state("NOT_STARTED")
        self.active_store.state("source")
        self.gate_open.set(1)
        self.watch_coordinator(lambda: (False, 0, 0))

    def watch_coordinator(self, view: Callable[[], tuple[bool, int, int]]) -> None:
        """Read the coordinator's state from ``view`` (leading, nodes done, nodes total) at every scrape."""
        self.leader.set_function(lambda: 1.0 if view()[0] else 0.0)
        self.copy_done.set_function(lambda: float(view()[1]))
        self.copy_total.set_function(lambda: float(view()[2]))

    def serve(self, address: str) -> None:
        """Serve /metrics on ``host:port`` (a daemon thread)."""
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host.strip("[]") or "0.0.0.0", registry=self.registry)
