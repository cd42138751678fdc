"""Participants: one sequential ephemeral node per agent under ``participants/``, holding JSON
with the agent's node id, role and address, the epoch it last acknowledged, and its heartbeat.

An agent acknowledges a migration by a compare-and-set of its own record (it never deletes it),
so status can always name who has and has not acknowledged. It also rewrites its record every
quarter of its ``timeout`` (``heartbeat`` + 1): a record that has not changed for ``timeout``
seconds, as its observer measures it, belongs to a dead agent, whatever its store session says.
A record without ``timeout`` (written by hand, or by an older agent) lives as long as its node.

The record also says which metashift ``version`` the agent runs, and answers ``migrate check``'s
dry opens of a target (``dryOpen``: the request's name, the target, whether the agent could open
it with its own credentials, and why not). Its node's own ephemeral owner is the agent's store
session (``owner``, read with the record): the session its clients' ephemerals live on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
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
    heartbeat: int = 0
    """Rewritten (+1) by the agent every quarter of ``timeout``."""
    heartbeat_at: int = 0
    """The agent's wall clock at its last heartbeat (milliseconds; for display only)."""
    timeout: float | None = None
    """The agent's ``coordinator.participant_timeout``: dead after that long without a heartbeat
    (``None``: no heartbeat; alive as long as the node exists)."""
    agent_version: str = ""
    """The metashift version the agent runs ("": an agent older than the field)."""
    dry_open: DryOpen | None = None
    """The agent's answer to the last ``migrate check`` it saw."""
    owner: int = 0
    """The store session the record's node lives on, the agent's own (read, never written)."""

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "nodeId": self.node_id, "role": self.role, "address": self.address, "acknowledged": self.acknowledged,
        }
        if self.timeout is not None:
            body.update(heartbeat=self.heartbeat, heartbeatAt=self.heartbeat_at, timeout=self.timeout)
        if self.agent_version:
            body["version"] = self.agent_version
        if self.dry_open is not None:
            body["dryOpen"] = self.dry_open.to_dict()
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str = "", version: int = -1, owner: int = 0) -> ParticipantRecord:
        body = json.loads(data)
        if not isinstance(body, dict) or not isinstance(body.get("nodeId"), str):
            raise ValueError("not a participant record")
        ack = body.get("acknowledged")
        timeout = body.get("timeout")
        return cls(
            body["nodeId"], str(body.get("role", "")), str(body.get("address", "")),
            ack if _whole(ack) else None, path, version,
            heartbeat=body["heartbeat"] if _whole(body.get("heartbeat")) else 0,
            heartbeat_at=body["heartbeatAt"] if _whole(body.get("heartbeatAt")) else 0,
            timeout=float(timeout) if isinstance(timeout, int | float) and not isinstance(timeout, bool)
            and timeout > 0 else None,
            agent_version=str(body.get("version") or ""),
            dry_open=DryOpen.from_dict(body.get("dryOpen")),
            owner=owner,
        )

    def answering(self, answer: DryOpen) -> ParticipantRecord:
        return dataclasses.replace(self, dry_open=answer)

    def acknowledging(self, epoch: int) -> ParticipantRecord:
        return dataclasses.replace(self, acknowledged=epoch)

    def beating(self) -> ParticipantRecord:
        """The record of the next heartbeat."""
        return dataclasses.replace(self, heartbeat=self.heartbeat + 1, heartbeat_at=int(time.time() * 1000))

    def heartbeat_age(self, now_ms: int | None = None) -> float | None:
        """Seconds since the last heartbeat by the wall clock of the one who asks (hosts' clocks
        differ: for display; the coordinator judges by its own monotonic clock)."""
        if self.timeout is None or not self.heartbeat_at:
            return None
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0.0, (now - self.heartbeat_at) / 1000.0)


@dataclass(frozen=True)
class DryOpen:
    """An agent's answer to a ``migrate check``: could it open the target with its own credentials?"""

    request: str
    """The request's node name (``check-NNNNNNNNNN``)."""
    target: str
    ok: bool
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request, "target": self.target, "ok": self.ok, "error": self.error}

    @classmethod
    def from_dict(cls, body: object) -> DryOpen | None:
        if not isinstance(body, dict) or not isinstance(body.get("request"), str):
            return None
        error = body.get("error")
        return cls(body["request"], str(body.get("target", "")), body.get("ok") is True,
                   error if isinstance(error, str) else None)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


async def list_participants(store: MetadataStore) -> list[ParticipantRecord]:
    """Every registered participant, in registration order; records that cannot be read are
    logged and left out."""
    names = await store.get_children(paths.PARTICIPANTS)
    names.sort(key=sequence_order)
    full = [f"{paths.PARTICIPANTS}/{name}" for name in names]
    out: list[ParticipantRecord] = []
    for path, got in zip(full, await store.batch([GetOp(p) for p in full]), strict=True):
        if isinstance(got, MetadataStoreError):
            raise got
        if not isinstance(got, tuple):
            continue  # gone since listed
        try:
            out.append(ParticipantRecord.from_json(got[0], path, got[1].version, got[1].owner))
        except ValueError:
            log.warning("participant node %s does not hold a participant record; ignored", path)
    return out


def sequence_order(name: str) -> tuple[int, str]:
    """Sort key of participant names in registration order (etcd's sequential names are unpadded)."""
    digits = name.rpartition("-")[2]
    return (int(digits), name) if digits.isdigit() else (-1, name)
