"""The coordinator's copy, in a process of its own: ``python -m metashift.coordinator.copy_job``.

It reads ``{"source": URL, "target": URL, "master": M, "ledgers_roots": [...], "counters": [...]}``
(URLs with their credentials; the counters' rules, ``copy_rules``) on standard input, so that no
secret shows on a command line, runs the Spark copy with its verification, and writes JSON lines
on standard output: ``{"event": "progress", ...}`` while it works, then one ``{"event":
"report", ...}`` or ``{"event": "error", ...}``. The agent's event loop and memory stay out of
Spark's way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from metashift.spark.copy import copy_tree
from metashift.spark.rules import DEFAULT_COUNTERS, DEFAULT_LEDGERS_ROOTS, Rules
from metashift.stores import MetadataStoreError


class JsonLinesProgress:
    """The copy's progress as JSON lines for the coordinator."""

    def __init__(self) -> None:
        self._stage = ""
        self._total = 0

    def listing(self, what: str, count: int) -> None:
        _emit({"event": "progress", "stage": what, "done": count, "total": 0})

    def start(self, what: str, nodes: int, size: int) -> None:
        self._stage, self._total = what, nodes
        _emit({"event": "progress", "stage": what, "done": 0, "total": nodes})

    def update(self, nodes: int, size: int) -> None:
        _emit({"event": "progress", "stage": self._stage, "done": nodes, "total": self._total})

    def finish(self) -> None:
        return None


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def copy_rules(ledgers_roots: Sequence[str] | None = None, counters: Sequence[str] | None = None) -> Rules:
    """The copy's rules with the coordinator's settings (``None``: the copy's defaults)."""
    return Rules(
        counters=DEFAULT_COUNTERS if counters is None else tuple(counters),
        ledgers_roots=DEFAULT_LEDGERS_ROOTS if ledgers_roots is None else tuple(ledgers_roots),
    )


def main() -> int:
    job = json.loads(sys.stdin.read())
    progress = JsonLinesProgress()
    rules = copy_rules(job.get("ledgers_roots"), job.get("counters"))
    try:
        # conflicts are reported with the verification: the coordinator carries them
        report = copy_tree(job["source"], job["target"], master=job.get("master"), verify=True, progress=progress,
                           rules=rules, keep_conflicts=True)  # fmt: skip
    except MetadataStoreError as e:
        _emit({"event": "error", "kind": type(e).__name__, "message": str(e)})
        return 1
    body = report.to_dict()
    body["event"] = "report"
    body["conflict_paths"] = [p for p, _ in report.conflicts]
    body["ok"] = report.verify is not None and report.verify.ok and not report.conflicts
    _emit(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
