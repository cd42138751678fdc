"""The copy's reports: what a copy and its verification found (``CopyReport``, ``VerifyReport``,
``Mismatch``), typed records shared by the copy job that writes them (``metashift.spark``), the
coordinator that reads them back from the job's JSON line (``from_dict``) and the CLI that
prints them (``text``, ``dumps``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from .counters import LEDGER_IDS, CounterCarry, CounterCheck

T = TypeVar("T")


def _known(cls: type[Any], body: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``body`` that are fields of ``cls`` (a JSON line carries more: ``event``, ``ok``)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in body.items() if k in names}


@dataclass(frozen=True)
class Mismatch:
    """One node the verification found different in the target."""

    path: str
    kind: str
    """``missing``, ``version``, ``value``, ``ephemeral`` (an ephemeral in the target where the
    source has a persistent node), ``extra`` (only in the target), ``counter``."""
    detail: str

    @classmethod
    def from_value(cls, value: dict[str, Any] | Iterable[Any]) -> Mismatch:
        """A mismatch from JSON (``to_dict``'s object) or from a task's ``(path, kind, detail)``
        triple (what Spark's tasks and ``counters.mismatch`` answer)."""
        if isinstance(value, dict):
            return cls(str(value["path"]), str(value["kind"]), str(value.get("detail", "")))
        path, kind, detail = value
        return cls(str(path), str(kind), str(detail))


@dataclass
class VerifyReport:
    """What a verification of a whole tree found."""

    source: str
    target: str
    nodes: int = 0
    bytes: int = 0
    counters: int = 0
    """Counter nodes of the source checked."""
    counter_checks: dict[str, CounterCheck] = field(default_factory=dict)
    """Each counter's promise as found: the source's next id, the target's, ok (a ledger-id
    generator by ``R/idgen-long``: the next id Pulsar's generator hands out)."""
    vanished: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    seconds: float = 0.0
    listing_seconds: float = 0.0
    nodes_per_second: float = 0.0
    listed_by_driver: int = 0
    """Nodes the driver listed: the top of the tree and the names of the subtrees' roots."""
    listed_by_executors: int = 0
    """Nodes the Spark executors listed (each subtree, its root included; both sides read)."""

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        d["mismatch_count"] = len(self.mismatches)
        return d

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> VerifyReport:
        """The report ``to_dict`` made (its ``ok`` and ``mismatch_count`` are computed again)."""
        known = _known(cls, body)
        known["mismatches"] = [Mismatch.from_value(m) for m in body.get("mismatches") or []]
        known["counter_checks"] = {p: CounterCheck(**_known(CounterCheck, c))
                                   for p, c in (body.get("counter_checks") or {}).items()}
        return cls(**known)

    def text(self) -> str:
        lines = [
            f"verified {self.nodes} nodes ({size_text(self.bytes)}) and {self.counters} counters "
            f"in {self.seconds:.1f}s ({self.nodes_per_second:,.0f} nodes/s): "
            + ("all equal" if self.ok else f"{len(self.mismatches)} mismatches")
        ]
        shown = _first(self.counter_checks, lambda c: (c.ok, c.scheme != LEDGER_IDS))
        lines += [f"  counter   {p}: {c.carried}, next id {c.source} in the source, {c.target} in the target"
                  + ("" if c.ok else "  NOT ABOVE") for p, c in shown]
        if len(shown) < len(self.counter_checks):
            lines.append(f"  counter   ... and {len(self.counter_checks) - len(shown)} more (all of them with --json)")
        lines += [f"  {m.kind:9} {m.path}: {m.detail}" for m in self.mismatches[:100]]
        if len(self.mismatches) > 100:
            lines.append(f"  ... and {len(self.mismatches) - 100} more (all of them with --json)")
        return "\n".join(lines)


@dataclass
class CopyReport:
    """What a copy of a whole tree did, and its verification when it ran one."""

    source: str
    target: str
    nodes: int = 0
    """Persistent nodes copied or found equal."""
    bytes: int = 0
    written: int = 0
    """Nodes the copy created or moved forward (0 on a second run)."""
    unchanged: int = 0
    ephemerals_skipped: int = 0
    vanished: int = 0
    write_ops: int = 0
    """Writes sent to the target, counters included."""
    write_amplification: float = 0.0
    """``write_ops`` per node written: keeping version V takes V+1 writes."""
    counters: dict[str, CounterCarry] = field(default_factory=dict)
    """What the copy did to each counter (``counters.CounterCarry``)."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """Nodes the target holds ahead of the source (path, why): nothing was written at or below
    them (``copy_tree(keep_conflicts=True)`` reports them here rather than raising)."""
    counter_writes: int = 0
    """Writes the counters took (within ``write_ops``)."""
    counter_seconds: float = 0.0
    """The longest carry of a counter (they run beside the copy)."""
    seconds: float = 0.0
    nodes_per_second: float = 0.0
    bytes_per_second: float = 0.0
    listing_seconds: float = 0.0
    copy_seconds: float = 0.0
    counters_seconds: float = 0.0
    """How long the driver's child process moved the top's counters (beside the copy, within
    ``copy_seconds``; 0 when the top holds none: the executors move those they copy)."""
    timeline: dict[str, float] = field(default_factory=dict)
    """When each step ended, in seconds since the copy started (``spark_ready``, ``top_copied``,
    ``job_done``, and ``counters_done`` when the top held counters): what the copy waited for."""
    compaction_seconds: float = 0.0
    """The final compaction (etcd: the request only; the server frees the space afterwards)."""
    compactions: int = 0
    """Compactions of the target's history: during the copy (each time its backend has grown by
    ``compact_every_bytes``) and after it. Stores without a history (ZooKeeper) count them too;
    for them they cost nothing."""
    partitions: int = 0
    listed_by_driver: int = 0
    """Nodes the driver listed: the top of the tree and the names of the subtrees' roots."""
    listed_by_executors: int = 0
    """Nodes the Spark executors listed and read (the subtrees below the top)."""
    verify: VerifyReport | None = None

    @property
    def passed(self) -> bool:
        """Verified, every node equal, and no node of the target left alone as a conflict."""
        return self.verify is not None and self.verify.ok and not self.conflicts

    @property
    def conflict_paths(self) -> list[str]:
        return [path for path, _why in self.conflicts]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.verify is not None:
            d["verify"] = self.verify.to_dict()
        return d

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> CopyReport:
        """The report ``to_dict`` made (the copy job's JSON line: its other keys are ignored)."""
        known = _known(cls, body)
        counters = body.get("counters") or {}
        known["counters"] = {p: CounterCarry(**_known(CounterCarry, c)) for p, c in counters.items()}
        known["conflicts"] = [(str(p), str(why)) for p, why in body.get("conflicts") or []]
        known["timeline"] = {str(k): float(v) for k, v in (body.get("timeline") or {}).items()}
        verify = body.get("verify")
        known["verify"] = VerifyReport.from_dict(verify) if isinstance(verify, dict) else None
        return cls(**known)

    def text(self) -> str:
        lines = [
            f"copied {self.source} -> {self.target}",
            f"  nodes      {self.nodes} ({self.written} written, {self.unchanged} already equal), "
            f"{size_text(self.bytes)}",
            f"  skipped    {self.ephemerals_skipped} ephemerals",
            f"  counters   {len(self.counters)}: {self.counter_writes} writes, {self.counter_seconds:.1f}s"
            + "".join(f"\n    {p}: {c.carried}, next id {c.source} -> {c.target} ({c.writes} writes)"
                      for p, c in _first(self.counters, lambda c: (c.scheme != LEDGER_IDS, -c.writes)))
            + (f"\n    ... and {len(self.counters) - COUNTERS_SHOWN} more (all of them with --json)"
               if len(self.counters) > COUNTERS_SHOWN else ""),
            f"  time       {self.seconds:.1f}s (listing {self.listing_seconds:.1f}s, copy {self.copy_seconds:.1f}s, "
            f"counters {self.counters_seconds:.1f}s beside it): {self.nodes_per_second:,.0f} nodes/s",
            f"  writes     {self.write_ops} ({self.write_amplification:.2f} per node written)",
        ]
        if self.verify is not None:
            lines.append(self.verify.text())
        return "\n".join(lines)


#: Counters the text reports name at most (the ledger-id generators and the failing ones first).
COUNTERS_SHOWN = 20


def _first(items: dict[str, T], rank: Callable[[T], Any]) -> list[tuple[str, T]]:
    """At most ``COUNTERS_SHOWN`` of ``items``, the lowest ``rank`` first, then by path."""
    return sorted(sorted(items.items(), key=lambda kv: (rank(kv[1]), kv[0]))[:COUNTERS_SHOWN])


def dumps(report: CopyReport | VerifyReport) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True)


def size_text(n: int) -> str:
    """``n`` bytes as people read them (``12.3 MB``)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)
