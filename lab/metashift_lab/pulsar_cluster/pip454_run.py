"""Pulsar 4.2's own migration (PIP-454) run as its documentation has it, to be measured beside
metashift's: a cluster born on ZooKeeper with no agent (brokers on ``zk:`` URLs, the bookie on
``metadata-store:zk:``), ``pulsar-admin metadata-migration start --target oxia://...`` (its REST
call, ``POST /admin/v2/metadata/migration/start?target=``: 204, the migration runs in the broker's
background), then its flag followed in ZooKeeper itself (``GET .../status`` reads it through the
broker's phase-routed store and says COPYING for ever after COMPLETED in 4.2.4: apache/pulsar#25993).

What it is judged by: the flag's phases and when each was first seen, PREPARATION to COMPLETED
from the flag node's own creation and modification times (its writes are refused in between), the
refused writes and the steps PIP-454's code logged in every Pulsar process, its REST status after
COMPLETED, and whether a way back exists (its ``start`` takes ``oxia://`` targets only).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from metashift.stores import open_store

from .admin import AdminError, PulsarAdmin
from .cluster import PulsarCluster

#: PIP-454's flag (``MigrationState.MIGRATION_FLAG_PATH``, a compile-time constant in Pulsar 4.2).
FLAG = "/pulsar/migration-coordinator/migration"
START = "/admin/v2/metadata/migration/start"
STATUS = "/admin/v2/metadata/migration/status"
ENDED = ("COMPLETED", "FAILED")
#: How long PIP-454's migration may take before the benchmark calls it stuck (its preparation waits
#: 60 s at most for its participants, then copies the whole tree).
FOLLOW_S = 600.0
POLL_S = 0.05
#: What a ``DualMetadataStore`` answers a write in PREPARATION and COPYING (one shared exception).
REFUSED_WRITE = "Write operations not allowed during migrations"
#: The steps PIP-454's code logs (``DualMetadataStore``, ``MigrationCoordinator``), and its failures.
STEPS = re.compile(
    r"(DualMetadataStore|MigrationCoordinator|MetadataMigrationBase) - ("
    r"=== .* ===|Found \d+ local ephemeral nodes to recreate|Waiting for participants to prepare.*|"
    r"All migration participants ready|Failed to wait for .*|All data copied.*|Migration failed.*|"
    r"Failed during migration preparation.*|Metadata migration failed.*)"
)
_COPIED = re.compile(r"All data copied\. total records=(\d+)")
_TIMESTAMPED = re.compile(r"^(\d{13}) ")


@dataclass
class Pip454Migration:
    """PIP-454's own migration of ``cluster`` (source ZooKeeper, target Oxia), started through the
    REST API of its first broker and followed by its flag in ZooKeeper."""

    cluster: PulsarCluster
    admin: PulsarAdmin
    started_at: float = 0.0
    """Wall clock of the ``start`` call."""
    http: int = 0
    """The ``start`` call's HTTP status (204: accepted, it runs in the background)."""
    answer: str = ""
    phase: str = "NOT_STARTED"
    seen: list[tuple[str, float]] = field(default_factory=list)
    """Each phase of the flag as the benchmark first saw it (wall clock), in order."""
    prepared_at: float | None = None
    """The flag's creation (PREPARATION), ZooKeeper's own ctime."""
    completed_at: float | None = None
    """The flag's last write once COMPLETED or FAILED, ZooKeeper's own mtime."""
    status_after: Any = None
    """PIP-454's REST status after COMPLETED."""
    way_back: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """Pulsar's URL of the cluster's Oxia (``oxia://127.0.0.1:PORT``: its ``default`` namespace)."""
        return self.cluster.native_url("oxia")

    @property
    def refusing(self) -> tuple[float, float] | None:
        """PREPARATION to COMPLETED (or FAILED): its participants refuse their own writes in between."""
        if self.prepared_at is None or self.completed_at is None:
            return None
        return self.prepared_at, self.completed_at

    async def start(self) -> None:
        """``pulsar-admin metadata-migration start --target oxia://...`` (its REST call)."""
        self.started_at = time.time()
        try:
            answer = await asyncio.to_thread(self.admin.call, "POST", f"{START}?target={self.target}")
            self.http, self.answer = 204, json.dumps(answer) if answer is not None else ""
        except AdminError as e:
            self.http, self.answer = e.status, str(e)

    async def follow(self, within: float = FOLLOW_S) -> str:
        """Read the flag in ZooKeeper until COMPLETED or FAILED, or ``within`` seconds (then the phase
        last seen, ``... (stuck)``); every phase is noted when first seen."""
        store = await open_store(self.cluster.store_url("zk"), watch=False, create_root=False)
        deadline = time.monotonic() + within
        try:
            while True:
                got = await store.get(FLAG)
                if got is not None:
                    phase = str(_json(got[0]).get("phase"))
                    if not self.seen or self.seen[-1][0] != phase:
                        self.seen.append((phase, time.time()))
                    self.phase = phase
                    if phase in ENDED:
                        self.prepared_at = got[1].creation_timestamp / 1000.0
                        self.completed_at = got[1].modification_timestamp / 1000.0
                        return phase
                if time.monotonic() > deadline:
                    self.phase = f"{self.phase} (stuck {within:g} s)"
                    return self.phase
                await asyncio.sleep(POLL_S)
        finally:
            await store.close()

    async def read_status(self) -> None:
        """PIP-454's own status (``pulsar-admin metadata-migration status``) after the migration."""
        try:
            self.status_after = await asyncio.to_thread(self.admin.call, "GET", STATUS)
        except AdminError as e:
            self.status_after = {"error": str(e)[:300]}

    async def try_way_back(self) -> None:
        """``metadata-migration start --target zk:...`` on a migrated broker: PIP-454 takes only
        ``oxia://`` targets (it answers 500 "Expected target metadata store to be Oxia" and writes
        nothing). Its flag in ZooKeeper stays COMPLETED, which sends every process started on its
        ``zk:`` URL to Oxia."""
        back = self.cluster.native_url("zk")
        self.way_back = {"target": back, **await _try_start(self.admin, back)}

    async def try_start_on_native(self) -> None:
        """After a restart on Oxia's own URL (a bare ``OxiaMetadataStore``, no ``DualMetadataStore``):
        a ``start`` answers 400 "not configured for migration"."""
        self.way_back["on_oxia"] = await _try_start(PulsarAdmin(*self.cluster.web_urls), self.cluster.native_url("zk"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "http": self.http, "answer": self.answer, "phase": self.phase,
            "seen": [{"phase": p, "at": round(t - self.started_at, 3)} for p, t in self.seen],
            "refusing_s": None if self.refusing is None else round(self.refusing[1] - self.refusing[0], 3),
            "status_after": self.status_after, "way_back": self.way_back,
        }  # fmt: skip


async def _try_start(admin: PulsarAdmin, target: str) -> dict[str, Any]:
    try:
        await asyncio.to_thread(admin.call, "POST", f"{START}?target={target}")
        return {"http": 204, "said": ""}
    except AdminError as e:
        return {"http": e.status, "said": _reason(str(e))}


def _reason(error: str) -> str:
    """The gist of an admin error: Pulsar's ``reason`` (its first line), else the error's start."""
    found = re.search(r'"reason"\s*:\s*"((?:[^"\\]|\\.)*)', error)
    text = found.group(1).encode().decode("unicode_escape", errors="replace") if found else error
    lines = [line.strip() for line in text.splitlines() if line.strip() and "---" not in line]
    return (lines[0] if lines else text)[:200]


@dataclass
class Pip454Logs:
    """What PIP-454's code logged in the Pulsar processes during its migration."""

    refused_writes: int = 0
    """Log records (timestamped lines) naming a write refused during the migration."""
    refused_by: dict[str, int] = field(default_factory=dict)
    steps: Counter[str] = field(default_factory=Counter)
    """Each step line (numbers kept), and how many processes logged it."""
    copied: int | None = None
    """Records PIP-454's coordinator copied (``All data copied. total records=N``)."""

    @classmethod
    def read(cls, logs: dict[str, str]) -> Pip454Logs:
        """From each process's log (name: text)."""
        found = cls()
        for name, text in logs.items():
            records = _records(text)
            refused = sum(1 for record in records if REFUSED_WRITE in record)
            if refused:
                found.refused_by[name] = found.refused_by.get(name, 0) + refused
                found.refused_writes += refused
            for record in records:
                head = record.split("\n", 1)[0]
                if m := STEPS.search(head):
                    found.steps[f"{m.group(1)}: {m.group(2)[:160]}"] += 1
                if m := _COPIED.search(head):
                    found.copied = int(m.group(1))
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"refused_writes": self.refused_writes, "refused_by": self.refused_by,
                "steps": dict(self.steps), "copied": self.copied}  # fmt: skip


def _records(text: str) -> list[str]:
    """A log's records: each timestamped line with the lines that follow it (a stack trace)."""
    records: list[str] = []
    for line in text.splitlines():
        if _TIMESTAMPED.match(line) or not records:
            records.append(line)
        else:
            records[-1] += "\n" + line
    return records


def _json(raw: bytes) -> dict[str, Any]:
    try:
        found = json.loads(raw)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
