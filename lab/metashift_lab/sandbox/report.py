"""The sandbox's report: what ``metashift sandbox`` prints, as text or as one JSON object."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from metashift.coordinator.progress import timing_text

from .clients import SimClient, WriteTiming


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50, p99 and max (nearest rank) of ``samples_ms``, rounded to 0.1 ms; zeros when empty."""
    if not samples_ms:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0, "count": 0}
    ordered = sorted(samples_ms)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    return {"p50": round(rank(50), 1), "p99": round(rank(99), 1), "max": round(ordered[-1], 1),
            "count": len(ordered)}  # fmt: skip


def split_timings(clients: list[SimClient], frozen: tuple[float, float] | None) -> tuple[list[float], list[float]]:
    """The latencies (ms) of the held writes — those in flight at some moment of ``frozen``
    (wall clock, seconds: from PREPARATION, when the agents close their gates, to the end of the
    migration) — and of all the others."""
    held: list[float] = []
    others: list[float] = []
    timings: list[WriteTiming] = [t for c in clients for t in c.timings]
    for t in timings:
        if frozen is not None and t.started <= frozen[1] and t.started + t.seconds >= frozen[0]:
            held.append(t.seconds * 1000)
        else:
            others.append(t.seconds * 1000)
    return held, others


@dataclass
class SandboxReport:
    """What a sandbox run measured and checked: the JSON of `metashift sandbox --json`."""

    phase: str = "NOT_STARTED"
    reason: str | None = None
    epoch: int = 0
    coordinator: str | None = None
    topics: int = 0
    brokers: int = 0
    bookies: int = 0
    clients: int = 0
    client_protocol: str = "grpc"
    """How the clients reach their agents: ``grpc`` or ``zookeeper`` (each agent's ZooKeeper front)."""
    source: str = "zk"
    target: str = "etcd"
    """The store kinds migrated from and into (``zk``, ``etcd``, ``oxia``)."""
    replicas: int = 1
    """Members of each store (1: single servers)."""
    nodes: int = 0
    """Persistent nodes of the generated Pulsar tree."""
    copied_nodes: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per stage: setup, generate, agents, PREPARATION, COPYING, after, check."""
    writes_acknowledged: int = 0
    writes_lost: int = 0
    lost: list[str] = field(default_factory=list)
    writes_failed: int = 0
    failures: list[str] = field(default_factory=list)
    ephemerals: int = 0
    ephemerals_carried: int = 0
    ephemerals_missing: list[str] = field(default_factory=list)
    write_hold_ms: dict[str, float] = field(default_factory=dict)
    write_ms: dict[str, float] = field(default_factory=dict)
    freeze_ms: float | None = None
    """From the first write gate closed to the last one reopened, over every agent (their logs)."""
    passes: int = 0
    """Full copy passes the coordinator ran while writes flowed (SYNCING)."""
    pass_timings: list[dict[str, Any]] = field(default_factory=list)
    """How long each pass took, and each stage of a Spark pass (the coordinator's progress)."""
    coordinator_verified: bool = False
    tree_verified: bool | None = None
    tree_check: dict[str, Any] = field(default_factory=dict)
    lives_on: str = ""
    """Where the cluster lives at the end (the target after COMPLETED, else the source)."""
    killed_agent: str | None = None
    pulsar: Any = None
    """``sandbox --pulsar``: the ``PulsarFigures`` of the real cluster (its JSON fields are added)."""
    adoption: Any = None
    """``sandbox --pulsar --adopt``: the ``AdoptionFigures`` of the rolling restart onto the agents."""
    beside_copy: dict[str, Any] = field(default_factory=dict)
    """``--beside-copy``: the migration's time beside ``copy --verify`` of the same tree (``beside_copy``)."""
    seconds: float = 0.0
    work_dir: str = ""

    @property
    def verified(self) -> bool:
        return self.coordinator_verified and self.tree_verified is True

    @property
    def ok(self) -> bool:
        if self.pulsar is not None:  # nothing lost, no ledger id reused, the target read everything back
            adopted = self.adoption is None or bool(self.adoption.ok)
            return self.phase == "COMPLETED" and bool(self.pulsar.ok) and adopted
        return self.phase == "COMPLETED" and self.writes_lost == 0 and self.verified

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "reason": self.reason,
            "epoch": self.epoch,
            "coordinator": self.coordinator,
            "ok": self.ok,
            "verified": self.verified,
            "coordinator_verified": self.coordinator_verified,
            "tree_verified": self.tree_verified,
            "tree_check": self.tree_check,
            "topics": self.topics,
            "brokers": self.brokers,
            "bookies": self.bookies,
            "clients": self.clients,
            "replicas": self.replicas,
            # the simulated clients' (a --pulsar run has none: Pulsar's own speak ZooKeeper's protocol)
            **({"client_protocol": self.client_protocol, "source": self.source, "target": self.target}
               if self.pulsar is None else {}),
            "nodes": self.nodes,
            "copied_nodes": self.copied_nodes,
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "writes_acknowledged": self.writes_acknowledged,
            "writes_lost": self.writes_lost,
            "lost": self.lost[:20],
            "writes_failed": self.writes_failed,
            "failures": self.failures[:20],
            "ephemerals": self.ephemerals,
            "ephemerals_carried": self.ephemerals_carried,
            "ephemerals_missing": self.ephemerals_missing,
            "write_hold_ms": self.write_hold_ms,
            "write_ms": self.write_ms,
            "freeze_ms": self.freeze_ms,
            "passes": self.passes,
            "pass_timings": self.pass_timings,
            "lives_on": self.lives_on,
            "killed_agent": self.killed_agent,
            "seconds": round(self.seconds, 3),
            **self.beside_copy,
            **(self.pulsar.json_fields() if self.pulsar is not None else {}),
            **({"adoption": self.adoption.to_dict()} if self.adoption is not None else {}),
        }

    def _adoption_lines(self) -> list[str]:
        a = self.adoption.to_dict()
        lines = [f"  adoption       rolling restart onto the agents: {', '.join(s['restarted'] for s in a['steps'])}; "
                 f"migrate check {'green' if a['ready_after'] else 'NOT green'} once every member was behind its agent"]
        for step in a["steps"]:
            lines.append(f"    before {step['restarted']:<9} check named {', '.join(step['named_before']) or 'nobody'}")
        if a["forgotten"]:
            f = a["forgotten"]
            forced = f.get("forced") or {}
            lines.append(f"  forgotten      {f['name']}: check exit {f['check_exit']} naming "
                         f"{', '.join(f['check_named'])}; start exit {f['start_exit']} (nothing written: "
                         f"{f['nothing_written']}); start --force -> {forced.get('phase')}: {forced.get('reason')}")
        return lines

    def text(self) -> str:
        mark = "PASSED" if self.ok else "FAILED"
        if self.pulsar is not None:
            return "\n".join([
                f"metashift sandbox --pulsar: {mark}",
                f"  migration      {self.phase} (epoch {self.epoch}, coordinator {self.coordinator})"
                + (f": {self.reason}" if self.reason else ""),
                "  phases         " + ", ".join(f"{k} {v:.1f}s" for k, v in self.phases.items()),
                "  freeze         " + ("-" if self.freeze_ms is None else f"{self.freeze_ms:.0f} ms"),
                *self.pulsar.text_lines(),
                *(self._adoption_lines() if self.adoption is not None else []),
                *[f"    {f}" for f in self.failures[:20]],
                f"  took           {self.seconds:.1f}s",
            ])  # fmt: skip
        lines = [
            f"metashift sandbox: {mark}",
            f"  cluster        {self.brokers} brokers, {self.bookies} bookies "
            f"({self.clients} clients over {self.client_protocol}), {self.topics} topics, {self.nodes} nodes",
            f"  migration      {self.phase} (epoch {self.epoch}, coordinator {self.coordinator})"
            + (f": {self.reason}" if self.reason else ""),
        ]
        if self.killed_agent:
            lines.append(f"  killed         {self.killed_agent} (SIGKILL)")
        lines.append("  phases         " + ", ".join(f"{k} {v:.1f}s" for k, v in self.phases.items()))
        h, w = self.write_hold_ms, self.write_ms
        freeze = "-" if self.freeze_ms is None else f"{self.freeze_ms:.0f} ms"
        lines.append(f"  freeze         {freeze} (first gate closed to last reopened), after {self.passes} full "
                     "pass(es) while writes flowed")
        lines += [f"    {timing_text(t)}" for t in self.pass_timings]
        lines += [
            f"  write hold     p50 {h.get('p50', 0):.0f} ms, p99 {h.get('p99', 0):.0f} ms, max {h.get('max', 0):.0f} ms"
            f" ({h.get('count', 0)} writes held through the freeze)",
            f"  other writes   p50 {w.get('p50', 0):.1f} ms, p99 {w.get('p99', 0):.1f} ms, "
            f"max {w.get('max', 0):.0f} ms",
            f"  writes         {self.writes_acknowledged} acknowledged, {self.writes_lost} lost, "
            f"{self.writes_failed} failed (checked on {self.lives_on or '-'})",
        ]
        lines += [f"    lost: {p}" for p in self.lost[:10]]
        lines += [f"    failed: {e}" for e in self.failures[:5]]
        lines.append(f"  ephemerals     {self.ephemerals_carried} of {self.ephemerals} carried into the target")
        lines += [f"    missing: {p}" for p in self.ephemerals_missing[:10]]
        tree = self.tree_check
        tree_line = (
            "not checked" if self.tree_verified is None
            else f"{tree.get('nodes', 0)} untouched nodes and {tree.get('counters', 0)} counters "
            + ("equal in source and target" if self.tree_verified else f"{tree.get('mismatch_count', '?')} mismatches")
        )  # fmt: skip
        lines += [
            f"  verification   coordinator: {'passed' if self.coordinator_verified else 'not passed'} "
            f"({self.copied_nodes} nodes copied); tree: {tree_line}",
        ]
        lines += [f"    {m}" for m in tree.get("shown", [])[:10]]
        if self.beside_copy:
            b = self.beside_copy
            ratio = b.get("migration_vs_copy")
            lines.append(f"  beside copy    migration {b['migration_seconds']:.1f}s (start to COMPLETED), "
                         f"copy --verify of the same tree {b['copy_verify_seconds']:.1f}s: "
                         + (f"{ratio:.2f}x" if ratio is not None else b.get("copy_verify_error", "no ratio")))
            if b.get("copy_verify_stages"):
                lines.append("    copy --verify alone (" + ", ".join(
                    f"{k} {float(v):.1f}" for k, v in b["copy_verify_stages"].items()) + ")")
        lines.append(f"  took           {self.seconds:.1f}s")
        return "\n".join(lines)
