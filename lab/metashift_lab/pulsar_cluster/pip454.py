"""Pulsar 4.2's own migration (PIP-454) on a cluster that metashift migrates: what shows that it
never acts.

Every ``zk:`` store of a 4.2 broker, bookie or cluster setup is a ``DualMetadataStore``: it logs
``Participant metadata store created: ...`` when it registers, and a line of its own for each
step it would take (``Initializing target metadata store``, ``=== Starting Metadata Migration
Preparation ===``, ``=== Metadata Migration Complete ===``, ...). Behind the agents it must register
and then do nothing. Its admin API (``pulsar-admin metadata-migration status|start``: REST
``/admin/v2/metadata/migration/...``; ``pulsar-client-tools`` 4.2.4 is not served here, so the REST
calls that command makes are made directly) must say NOT_STARTED with metashift's account of the
migration, and a ``start`` must start nothing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from .admin import AdminError, PulsarAdmin

#: A DualMetadataStore registered (through its agent).
REGISTERED = re.compile(r"DualMetadataStore - Participant metadata store created")
#: A DualMetadataStore acting on a flag, or PIP-454's coordinator migrating: never, behind the agents.
ACTING = re.compile(
    r"DualMetadataStore - (Initializing target metadata store|Target store initialized|=== |Found \d+ local "
    r"ephemeral nodes)|MigrationCoordinator - (Waiting for participants|All migration participants ready|"
    r"All data copied|=== Migration Complete)"
)
#: A refused ``start`` ends with these ERRORs (the front refused its flag): expected, not troubles.
START_FAILED = re.compile(r"MigrationCoordinator - Migration failed|MetadataMigrationBase - Metadata migration failed")
#: How long a refused ``start`` takes to show in the status (it runs in the broker's background).
REFUSAL_WITHIN_S = 60.0
#: How the front's flag starts its ``targetUrl`` (``metashift.agent.zookeeper.pip454``).
FRONTED = "metashift fronts this cluster"
REFUSED = "pulsar-admin metadata-migration start"


@dataclass
class Pip454Figures:
    """What PIP-454's code did on the cluster; ``to_dict`` is the sandbox report's ``pip454``."""

    registered: int = 0
    """``DualMetadataStore`` registrations in the processes' logs (one per store)."""
    acted: list[str] = field(default_factory=list)
    """Log lines of a ``DualMetadataStore`` or ``MigrationCoordinator`` taking a migration step."""
    status: dict[str, Any] = field(default_factory=dict)
    """``GET /admin/v2/metadata/migration/status`` at each moment asked (``during``, ``after``)."""
    start: dict[str, Any] | None = None
    """``POST /admin/v2/metadata/migration/start?target=`` during the migration: its HTTP status and
    the status read after it."""
    troubles: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"registered": self.registered, "acted": self.acted[:10], "status": self.status,
                "start": self.start}

    def read_logs(self, logs: list[str]) -> None:
        for text in logs:
            self.registered += len(REGISTERED.findall(text))
            self.acted += [line[:300] for line in text.splitlines() if ACTING.search(line)]
        if not self.registered:
            self.troubles.append("pip454: no DualMetadataStore registered: is this a 4.2 release?")
        if self.acted:
            self.troubles.append(f"pip454: PIP-454's code acted: {self.acted[0]}")

    def read_status(self, admin: PulsarAdmin, moment: str) -> None:
        try:
            answer = admin.call("GET", "/admin/v2/metadata/migration/status")
        except AdminError as e:
            self.troubles.append(f"pip454: status {moment}: {e}")
            return
        self.status[moment] = answer
        if not isinstance(answer, dict) or answer.get("phase") != "NOT_STARTED":
            self.troubles.append(f"pip454: status {moment} is not NOT_STARTED: {answer}")
        elif FRONTED not in str(answer.get("targetUrl", "")):
            self.troubles.append(f"pip454: status {moment} does not say where metashift stands: {answer}")

    def try_start(self, admin: PulsarAdmin, target: str) -> None:
        """``metadata-migration start --target`` (a reachable Oxia: with an unreachable one Pulsar
        4.2.4 never answers): accepted (204, it runs in the background) and then refused by the
        front, which the status read after names."""
        try:
            admin.call("POST", f"/admin/v2/metadata/migration/start?target={target}")
            code = 204
        except AdminError as e:
            code = e.status
        self.start = {"target": target, "http": code, "refused": False}
        deadline = time.monotonic() + REFUSAL_WITHIN_S
        while not self.start["refused"] and time.monotonic() < deadline:
            time.sleep(0.5)
            self.read_status(admin, "after start")
            after = str((self.status.get("after start") or {}).get("targetUrl", ""))
            self.start["refused"] = after.startswith(REFUSED)
        if not self.start["refused"]:
            self.troubles.append(f"pip454: the start was not said to be refused: {self.status.get('after start')}")
