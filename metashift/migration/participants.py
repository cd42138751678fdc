"""Participants: one sequential ephemeral node per agent under ``participants/``, holding JSON
with the agent's node id, role and address, and the epoch it last acknowledged.

An agent acknowledges a migration by a compare-and-set of its own record (it never deletes it),
so status can always name who has and has not acknowledged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any

from metashift.stores import GetOp, MetadataStore, MetadataStoreError

from . import paths

log = logging.getLogger(__name__)

ROLES = ("broker", "bookie")


@dataclass(frozen=True)
class ParticipantRecord:
    """One agent's registration, with the path and version it was read at."""

    node_id: str
    role: str
    address: str
    acknowledged: int | None = None
    """The epoch this agent acknowledged last (``None``: none yet)."""
    path: str = ""
    version: int = -1

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "nodeId": self.node_id, "role": self.role, "address": self.address, "acknowledged": self.acknowledged,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str = "", version: int = -1) -> ParticipantRecord:
        body = json.loads(data)
        if not isinstance(body, dict) or not isinstance(body.get("nodeId"), str):
            raise ValueError("not a participant record")
        ack = body.get("acknowledged")
        return cls(
            body["nodeId"], str(body.get("role", "")), str(body.get("address", "")),
            ack if isinstance(ack, int) and not isinstance(ack, bool) else None, path, version,
        )

    def acknowledging(self, epoch: int) -> ParticipantRecord:
        return dataclasses.replace(self, acknowledged=epoch)


async def list_participants(store: MetadataStore) -> list[ParticipantRecord]:
    """Every registered participant, in registration order; records that cannot be read are
    logged and left out."""
    names = await store.get_children(paths.PARTICIPANTS)
    names.sort(key=_sequence)
    full = [f"{paths.PARTICIPANTS}/{name}" for name in names]
    out: list[ParticipantRecord] = []
    for path, got in zip(full, await store.batch([GetOp(p) for p in full]), strict=True):
        if isinstance(got, MetadataStoreError):
            raise got
        if not isinstance(got, tuple):
            continue  # gone since listed
        try:
            out.append(ParticipantRecord.from_json(got[0], path, got[1].version))
        except ValueError:
            log.warning("participant node %s does not hold a participant record; ignored", path)
    return out


def _sequence(name: str) -> tuple[int, str]:
    digits = name.rpartition("-")[2]
    return (int(digits), name) if digits.isdigit() else (-1, name)
