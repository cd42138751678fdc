"""The coordinator's copy, in a process of its own: ``python -m metashift.coordinator.copy_job``.

It reads ``{"source": URL, "target": URL, "master": M, "ledgers_roots": [...], "counters": [...]}``
(URLs with their credentials; the counters' rules, ``configured_rules``) as the first line of standard
input, so that no secret shows on a command line, runs the Spark copy with its verification, and
writes JSON lines on standard output: ``{"event": "progress", ...}`` while it works, then one
``{"event": "report", ...}`` or ``{"event": "error", ...}``. The agent's event loop and memory stay
out of Spark's way.

A job that carries ``"lease_until"`` (the coordinator's leader lease, a ``time.monotonic()``
deadline: one clock for every process of the host) lives only as long as that lease: further lines
``{"lease_until": T}`` extend it, and once it runs out the job says so (``LeaseExpired``) and kills
itself, Spark and Spark's workers. A coordinator that was paused (SIGSTOP, a stalled host) cannot
extend it, so its copy stops writing into the target before another coordinator can take over,
as the coordinator's own writes do (``LeaderElection.fresh``).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from metashift import grpc_env, processes
from metashift.copy.rules import configured_rules
from metashift.spark.copy import copy_tree
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


#: How often the job looks at its lease.
LEASE_POLL_SECONDS = 0.05
#: A second look before the job ends itself: lines that waited in the pipe while the job itself was
#: paused are read first (the coordinator's lease is 80 % of its timeout: the margin is seconds).
LEASE_GRACE_SECONDS = 0.3


class LeaseWatch:
    """Kills the job's whole process tree once the coordinator's lease runs out."""

    def __init__(self, lease_until: float) -> None:
        self.lease_until = lease_until

    def start(self) -> None:
        threading.Thread(target=self._read, name="lease-lines", daemon=True).start()
        threading.Thread(target=self._watch, name="lease-watch", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:  # until the coordinator closes the pipe (or dies: PDEATHSIG)
            try:
                self.lease_until = max(self.lease_until, float(json.loads(line)["lease_until"]))
            except (ValueError, KeyError, TypeError):
                continue

    def _watch(self) -> None:
        while True:
            while time.monotonic() <= self.lease_until:
                time.sleep(LEASE_POLL_SECONDS)
            time.sleep(LEASE_GRACE_SECONDS)
            if time.monotonic() > self.lease_until:
                break
        _emit({"event": "error", "kind": "LeaseExpired",
               "message": "the coordinator's leader lease ran out: the copy stopped writing into the target"})
        # every process below this one (Spark's JVM, and its Python workers, which live in a
        # process group of their own), then this one
        processes.kill_tree()


def main() -> int:
    grpc_env.configure()  # first: nothing has loaded grpc yet
    job = json.loads(sys.stdin.readline())
    if job.get("lease_until") is not None:
        LeaseWatch(float(job["lease_until"])).start()
    progress = JsonLinesProgress()
    rules = configured_rules(job.get("ledgers_roots"), job.get("counters"))
    try:
        # conflicts are reported with the verification: the coordinator carries them
        report = copy_tree(job["source"], job["target"], master=job.get("master"), verify=True, progress=progress,
                           rules=rules, keep_conflicts=True)  # fmt: skip
    except MetadataStoreError as e:
        _emit({"event": "error", "kind": type(e).__name__, "message": str(e)})
        return 1
    _emit({"event": "report", **report.to_dict()})  # read back as a ``CopyReport`` (``copy_runner``)
    return 0


if __name__ == "__main__":
    sys.exit(main())
