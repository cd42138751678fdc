"""PREPARATION on the coordinator: waiting for every live participant's acknowledgement.

A participant is live while its record keeps changing (its heartbeat, ``migration.liveness``):
one whose record has not changed for its ``participant_timeout`` is dead, and is dropped from
the wait (named in the flag's ``dropped`` when the migration moves on). A target that does not
answer for ``participant_timeout`` fails the migration: every write of the cluster is waiting.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from metashift.migration.liveness import Liveness
from metashift.migration.participants import ParticipantRecord, list_participants
from metashift.stores import MetadataStore

log = logging.getLogger(__name__)


@dataclass
class Acknowledgements:
    """Where PREPARATION stands for one epoch."""

    acknowledged: list[ParticipantRecord] = field(default_factory=list)
    waiting: list[ParticipantRecord] = field(default_factory=list)
    """Live participants that have not acknowledged yet."""
    dropped: list[ParticipantRecord] = field(default_factory=list)
    """Dead participants that had not acknowledged: no longer waited for."""

    @property
    def complete(self) -> bool:
        return not self.waiting


class ParticipantWatch:
    """The coordinator's (or a standby's) view of the participants' heartbeats."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.liveness = Liveness()
        self._dead_logged: set[str] = set()

    async def observe(self) -> list[ParticipantRecord]:
        """List the participants and note their records' versions (their heartbeats)."""
        records = await list_participants(self.store)
        for record in records:
            self.liveness.observe(record.path, record.version)
        self.liveness.keep_only({r.path for r in records})
        return records

    def dead(self, record: ParticipantRecord) -> bool:
        """No heartbeat seen for its timeout (a record that does not beat is never dead)."""
        if record.timeout is None or self.liveness.age(record.path) <= record.timeout:
            return False
        if record.path not in self._dead_logged:
            self._dead_logged.add(record.path)
            # its record is still there: its store session (and its members' ephemerals) lives on,
            # and an agent restarting slower than its timeout is not waited for either
            log.warning("participant %s (%s) gave no heartbeat for %.1fs (its timeout: %gs): dead to the migration; "
                        "if only its agent is down, its members' ephemerals are missing from the target from the "
                        "switch until that agent is back", record.node_id, record.path, self.liveness.age(record.path),
                        record.timeout)
        return True

    async def acknowledgements(self, epoch: int) -> Acknowledgements:
        out = Acknowledgements()
        for record in await self.observe():
            if record.acknowledged == epoch:
                out.acknowledged.append(record)
            elif self.dead(record):
                out.dropped.append(record)
            else:
                out.waiting.append(record)
        return out


def deadline_passed(phase_since_ms: int, timeout: float) -> bool:
    return time.time() > phase_since_ms / 1000.0 + timeout
