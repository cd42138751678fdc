"""Reports, errors and the progress display of the copy and the verification."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

from metashift.copy.counters import LEDGER_IDS, CounterCarry, CounterCheck
from metashift.stores import MetadataStoreError, errors, parse_url

T = TypeVar("T")

# ---- errors ---------------------------------------------------------------------------------------


class CopyConflict(MetadataStoreError):
    """Target nodes the copy must not overwrite (ahead of the source, or different at the same
    version, or ephemeral). Nothing is lost: the other nodes were copied, these were left alone."""

    def __init__(self, conflicts: list[tuple[str, str]]) -> None:
        self.conflicts = sorted(conflicts)
        path, why = self.conflicts[0]
        more = f" (and {len(self.conflicts) - 1} more conflicting nodes)" if len(self.conflicts) > 1 else ""
        super().__init__(f"conflict in the target, {why}{more}", path)


class SameStore(MetadataStoreError):
    def __init__(self, url: str) -> None:
        super().__init__(f"source and target are the same store ({url})")


class SparkUnavailable(MetadataStoreError):
    """Spark could not be started (a malformed master URL, no Java, a master that refused us)."""


class EmptySource(MetadataStoreError):
    def __init__(self, url: str) -> None:
        super().__init__(f"the source holds no nodes at {parse_url(url)}: is its chroot or prefix right?")


def raise_task_error(error: dict[str, Any]) -> None:
    """Raise the store error an executor reported (by class name, ``MetadataStoreError`` when
    the name is unknown), keeping its message and path."""
    cls = getattr(errors, str(error.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, MetadataStoreError)):
        cls = MetadataStoreError
    e = MetadataStoreError.__new__(cls)
    Exception.__init__(e, error["message"])
    e.path = error.get("path")
    raise e


# ---- reports --------------------------------------------------------------------------------------


@dataclass
class Mismatch:
    path: str
    kind: str
    """``missing``, ``version``, ``value``, ``ephemeral`` (an ephemeral in the target where the
    source has a persistent node), ``extra`` (only in the target), ``counter``."""
    detail: str


@dataclass
class VerifyReport:
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

    def text(self) -> str:
        lines = [
            f"verified {self.nodes} nodes ({_size(self.bytes)}) and {self.counters} counters "
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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.verify is not None:
            d["verify"] = self.verify.to_dict()
        return d

    def text(self) -> str:
        lines = [
            f"copied {self.source} -> {self.target}",
            f"  nodes      {self.nodes} ({self.written} written, {self.unchanged} already equal), {_size(self.bytes)}",
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


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


# ---- progress -------------------------------------------------------------------------------------


class Progress(Protocol):
    def listing(self, what: str, count: int) -> None: ...

    def start(self, what: str, nodes: int, size: int) -> None: ...

    def update(self, nodes: int, size: int) -> None: ...

    def finish(self) -> None: ...


class NoProgress:
    def listing(self, what: str, count: int) -> None:
        pass

    def start(self, what: str, nodes: int, size: int) -> None:
        pass

    def update(self, nodes: int, size: int) -> None:
        pass

    def finish(self) -> None:
        pass


class RichProgress:
    """Progress bars on stderr: nodes and bytes of the total."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as _Progress

        self._bar = _Progress(
            TextColumn("{task.description:<10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("nodes"),
            TaskProgressColumn(),
            TextColumn("{task.fields[size]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
            transient=False,
        )
        self._bar.start()
        self._task: Any = None
        self._total_size = 0

    def listing(self, what: str, count: int) -> None:
        if self._task is None or self._bar.tasks[self._task].description != what:
            self._task = self._bar.add_task(what, total=None, size="")
        self._bar.update(self._task, completed=count)

    def start(self, what: str, nodes: int, size: int) -> None:
        self._total_size = size
        # the total is unknown (0) when the executors list the tree as they go
        self._task = self._bar.add_task(what, total=nodes or None, size=f"0 B / {_size(size)}" if size else "")

    def update(self, nodes: int, size: int) -> None:
        if self._task is not None:
            shown = f"{_size(size)} / {_size(self._total_size)}" if self._total_size else _size(size)
            self._bar.update(self._task, completed=nodes, size=shown)

    def finish(self) -> None:
        self._bar.stop()


def make_progress(enabled: bool | None) -> Progress:
    """Rich progress on stderr when ``enabled``, or (``None``) when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return RichProgress() if enabled else NoProgress()
