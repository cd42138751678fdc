"""``sandbox --beside-copy``: the whole migration beside ``metashift copy --verify`` of the same
tree on the same machine, in one run.

After the migration and its checks, with the agents and clients stopped (nothing else of the
sandbox runs), ``metashift copy --verify`` copies the source into a fresh, empty store of the
target's kind, as a user runs it (its own process: interpreter, Spark, copy, verification). Its wall time is the
floor the migration is measured against: from ``migrate start`` to COMPLETED (SYNCING,
PREPARATION and COPYING) the migration copied the same tree while clients wrote through five
agents on the same cores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metashift import processes
from metashift.coordinator.progress import pass_timing
from metashift.copy.report import CopyReport
from metashift_lab.cli_runner import run_cli_json
from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper

#: The phases from ``migrate start`` to COMPLETED.
MIGRATION_PHASES = ("SYNCING", "PREPARATION", "COPYING")


@dataclass
class BesideCopy:
    """``metashift copy --verify`` of the migrated tree into a fresh store: its wall time and report."""

    seconds: float
    nodes: int
    ok: bool
    error: str = ""
    stages: dict[str, float] | None = None
    """The copy's own stages, named as a full pass's (``pass_timing``): set beside its stages."""

    def fields(self, phases: dict[str, float]) -> dict[str, Any]:
        """The report's fields: both times and their ratio (None when the copy did not pass)."""
        migration = sum(phases.get(p, 0.0) for p in MIGRATION_PHASES)
        return {
            "migration_seconds": round(migration, 3),
            "copy_verify_seconds": round(self.seconds, 3),
            "copy_verify_nodes": self.nodes,
            "migration_vs_copy": round(migration / self.seconds, 2) if self.ok and self.seconds > 0 else None,
            "copy_verify_stages": self.stages or {},
            **({"copy_verify_error": self.error} if self.error else {}),
        }


async def copy_beside(source_url: str, work_dir: Path, procs: list[processes.AsyncChild],
                      target: LocalZooKeeper | LocalEtcd | LocalOxia | None = None) -> BesideCopy:  # fmt: skip
    """Run ``metashift copy --verify`` from ``source_url`` into ``target`` (a new etcd under
    ``work_dir`` unless given; started and removed here); ``procs`` gets the child process (the
    sandbox's cleanup kills it)."""
    target = target or LocalEtcd(work_dir / "etcd-beside-copy")
    target.start()
    try:
        began = time.monotonic()
        try:
            body, status = await run_cli_json(["copy", "--source", source_url, "--target", target.url, "--verify",
                                               "--json", "--no-progress"], procs)  # fmt: skip
        except RuntimeError as e:
            return BesideCopy(time.monotonic() - began, 0, False, str(e))
        seconds = time.monotonic() - began
        verify = body.get("verify") or {}
        ok = status == 0 and bool(verify.get("ok"))
        stages = pass_timing("full", 1, seconds, report=CopyReport.from_dict(body)).get("stages")
        return BesideCopy(seconds, int(body.get("nodes") or 0), ok, "" if ok else "copy --verify did not pass",
                          stages if isinstance(stages, dict) else None)
    finally:
        target.cleanup()
