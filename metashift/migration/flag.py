"""The migration flag: an immutable record of one migration's state, its JSON codec, and the
compare-and-set that is the only way to move it.

The JSON keeps Pulsar's two fields, ``phase`` and ``targetUrl`` (PIP-454 writes
``{"phase":"PREPARATION","targetUrl":"..."}``), and adds metashift's: ``epoch`` (grows with every
start), ``reason`` (why it FAILED), ``coordinator`` (the node id of the leader that made the last
move), ``startedAt`` and ``phaseSince`` (milliseconds since the epoch), ``targetCleaned``
(FAILED: what the copy wrote into the target has been removed) and ``dropped`` (the node ids of
participants the coordinator stopped waiting for in PREPARATION: no heartbeat for their
``participant_timeout``) and ``released`` (``false`` only in a COMPLETED flag whose coordinator is
still carrying what changed in the source before its COMPLETED write: agents keep holding the
writes until the key goes), ``forced`` (``migrate start --force --reason``: the reason, the
pre-flight problems overridden and the store sessions no agent held then, which the
coordinator tolerates) and ``switchPosition`` (where the source's history stood at the COMPLETED
write: ``BulkStore.position_of``; ``status`` on the store the cluster left names what was written
there after it). A flag read from the store
carries the store version it was read at; every move is a compare-and-set on that version, so a
deposed coordinator, whose copy is stale, can never move a phase.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

from metashift.stores import BadVersion, MetadataStore, MetadataStoreError

from . import paths
from .phase import Phase, check_transition


class MalformedFlag(MetadataStoreError):
    """The flag node holds something that is not a migration flag."""

    def __init__(self, message: str) -> None:
        super().__init__(f"malformed migration flag at {paths.FLAG}: {message}", paths.FLAG)


class FlagChanged(MetadataStoreError):
    """The flag moved since it was read: someone else (a newer coordinator, ``abort``) wrote it."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or f"the migration flag at {paths.FLAG} changed since it was read", paths.FLAG)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Forced:
    """Why an operator started a migration past the pre-flight check's problems, and what they were."""

    reason: str
    problems: tuple[str, ...] = ()
    sessions: tuple[int, ...] = ()
    """Store sessions no agent held at the start (the coordinator lets their ephemerals be)."""

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "problems": list(self.problems),
                "sessions": [f"0x{s:x}" for s in self.sessions]}

    @classmethod
    def from_dict(cls, body: object) -> Forced:
        if not isinstance(body, dict) or not isinstance(body.get("reason"), str):
            raise MalformedFlag(f"forced must be an object with a reason, not {body!r}")
        problems = body.get("problems") or []
        sessions = body.get("sessions") or []
        if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
            raise MalformedFlag("forced.problems must be a list of strings")
        try:
            owners = tuple(int(s, 16) for s in sessions)
        except (TypeError, ValueError):
            raise MalformedFlag(f"forced.sessions must be hexadecimal session ids, not {sessions!r}") from None
        return cls(body["reason"], tuple(problems), owners)


@dataclass(frozen=True)
class MigrationFlag:
    """One migration's state as the flag records it, with the store version it was read at."""

    phase: Phase
    target_url: str
    epoch: int
    reason: str | None = None
    coordinator: str | None = None
    started_at: int = 0
    phase_since: int = 0
    target_cleaned: bool = False
    dropped: tuple[str, ...] = ()
    """Participants the coordinator stopped waiting for (dead: no heartbeat in time)."""
    released: bool = True
    """False in a COMPLETED flag until the coordinator carried the source's last changes: the
    COMPLETED write is where the cluster switches, and a writer bypassing the agents may have
    written just before it, after the last check."""
    forced: Forced | None = None
    """``migrate start --force``: why, and what the pre-flight check found that it overrode."""
    switch_position: int | None = None
    """The source's position (``BulkStore.position_of``) at the COMPLETED write, once released."""
    version: int = -1
    """The flag node's version when read; -1 for a flag not (yet) stored."""

    # ---- codec -----------------------------------------------------------------------------------

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "phase": self.phase.value,
            "targetUrl": self.target_url,
            "epoch": self.epoch,
            "reason": self.reason,
            "coordinator": self.coordinator,
            "startedAt": self.started_at,
            "phaseSince": self.phase_since,
            "targetCleaned": self.target_cleaned,
        }
        if self.dropped:
            body["dropped"] = list(self.dropped)
        if not self.released:
            body["released"] = False
        if self.forced is not None:
            body["forced"] = self.forced.to_dict()
        if self.switch_position is not None:
            body["switchPosition"] = self.switch_position
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int = -1) -> MigrationFlag:
        """Decode the flag's JSON (Pulsar's two-field form too); ``MalformedFlag`` otherwise."""
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise MalformedFlag(f"not JSON ({e})") from None
        if not isinstance(body, dict):
            raise MalformedFlag("not a JSON object")
        try:
            phase = Phase(body.get("phase"))
        except ValueError:
            raise MalformedFlag(f"unknown phase {body.get('phase')!r}") from None
        target = body.get("targetUrl")
        if not isinstance(target, str) or not target:
            raise MalformedFlag("targetUrl must be a non-empty string")
        epoch = body.get("epoch", 0)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise MalformedFlag(f"epoch must be a whole number, not {epoch!r}")
        fields: dict[str, Any] = {}
        for key, attr, kind in (
            ("reason", "reason", str), ("coordinator", "coordinator", str),
            ("startedAt", "started_at", int), ("phaseSince", "phase_since", int),
            ("targetCleaned", "target_cleaned", bool), ("released", "released", bool),
        ):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise MalformedFlag(f"{key} must be a {kind.__name__}, not {value!r}")
            fields[attr] = value
        dropped = body.get("dropped")
        if dropped is not None:
            if not isinstance(dropped, list) or not all(isinstance(d, str) for d in dropped):
                raise MalformedFlag(f"dropped must be a list of node ids, not {dropped!r}")
            fields["dropped"] = tuple(dropped)
        if body.get("forced") is not None:
            fields["forced"] = Forced.from_dict(body["forced"])
        position = body.get("switchPosition")
        if position is not None:
            if not isinstance(position, int) or isinstance(position, bool):
                raise MalformedFlag(f"switchPosition must be a whole number, not {position!r}")
            fields["switch_position"] = position
        return cls(phase, target, epoch, version=version, **fields)

    # ---- moves -----------------------------------------------------------------------------------

    def moved(
        self, phase: Phase, *, coordinator: str | None = None, reason: str | None = None,
        dropped: tuple[str, ...] | None = None, released: bool = True,
    ) -> MigrationFlag:
        """This flag in ``phase`` (``IllegalTransition`` unless the table allows the move)."""
        check_transition(self.phase, phase)
        return dataclasses.replace(
            self, phase=phase, phase_since=now_ms(), reason=reason,
            coordinator=coordinator if coordinator is not None else self.coordinator,
            target_cleaned=False, dropped=self.dropped if dropped is None else dropped, released=released,
        )

    def left(self, arrived_epoch: int) -> bool:
        """The cluster left this store for ``target_url`` and has not come back: COMPLETED, and no
        later migration completed into this store (``arrived_epoch``: its origin's epoch)."""
        return self.phase is Phase.COMPLETED and self.epoch > arrived_epoch

    @property
    def holds_writes(self) -> bool:
        """Agents hold their node's writes: PREPARATION, COPYING, and a COMPLETED not yet released."""
        return self.phase.frozen or (self.phase is Phase.COMPLETED and not self.released)

    @property
    def elapsed_s(self) -> float:
        return max(0.0, (now_ms() - self.started_at) / 1000.0) if self.started_at else 0.0


def new_flag(target_url: str, previous: MigrationFlag | None, arrived_epoch: int = 0) -> MigrationFlag:
    """The flag of a new start: SYNCING, an epoch above ``previous``'s and above ``arrived_epoch``
    (the migration that brought the cluster into this store: epochs keep growing across stores).
    A COMPLETED ``previous`` older than that arrival is history (the cluster left, then came
    back): it counts as NOT_STARTED."""
    old_phase = previous.phase if previous is not None else Phase.NOT_STARTED
    if previous is not None and previous.phase is Phase.COMPLETED and not previous.left(arrived_epoch):
        old_phase = Phase.NOT_STARTED
    check_transition(old_phase, Phase.SYNCING)
    stamp = now_ms()
    return MigrationFlag(
        Phase.SYNCING, target_url, max(previous.epoch if previous else 0, arrived_epoch) + 1,
        started_at=stamp, phase_since=stamp, version=previous.version if previous else -1,
    )


async def read_flag(store: MetadataStore) -> MigrationFlag | None:
    """The flag as stored now, or ``None`` (NOT_STARTED)."""
    got = await store.get(paths.FLAG)
    if got is None:
        return None
    return MigrationFlag.from_json(got[0], got[1].version)


async def read_legacy_flag(store: MetadataStore) -> MigrationFlag | None:
    """A flag an older metashift wrote at PIP-454's place (``paths.LEGACY_FLAG``), or ``None``:
    no node there, or a flag that is not metashift's (Pulsar's own has no ``epoch``). It is
    read, never written: its ``version`` is -1, so a move of it writes the flag at its place."""
    got = await store.get(paths.LEGACY_FLAG)
    if got is None:
        return None
    try:
        body = json.loads(got[0])
        if not isinstance(body, dict) or "epoch" not in body:
            return None
        return MigrationFlag.from_json(got[0])
    except (ValueError, UnicodeDecodeError, MalformedFlag):
        return None


async def write_flag(store: MetadataStore, flag: MigrationFlag, read_at: int) -> MigrationFlag:
    """Store ``flag`` if the node is still at version ``read_at`` (-1: it must not exist);
    ``FlagChanged`` otherwise. Returns the flag with its new version."""
    try:
        stat = await store.put(paths.FLAG, flag.to_json(), expected_version=read_at)
    except BadVersion:
        raise FlagChanged() from None
    return dataclasses.replace(flag, version=stat.version)


async def move(
    store: MetadataStore, flag: MigrationFlag, phase: Phase, *, coordinator: str | None = None,
    reason: str | None = None, dropped: tuple[str, ...] | None = None, released: bool = True,
) -> MigrationFlag:
    """Move ``flag`` (as read) to ``phase``: checked against the table, then a compare-and-set on
    the version it was read at."""
    moved = flag.moved(phase, coordinator=coordinator, reason=reason, dropped=dropped, released=released)
    return await write_flag(store, moved, flag.version)


async def release(
    store: MetadataStore, flag: MigrationFlag, *, reason: str | None = None, switch_position: int | None = None
) -> MigrationFlag:
    """Let the agents go to the target of a COMPLETED ``flag`` (as read): a compare-and-set that
    drops ``released: false``; ``reason`` records what could not be carried, if anything;
    ``switch_position`` where the source's history stood at the COMPLETED write."""
    if flag.phase is not Phase.COMPLETED:
        raise ValueError(f"only a COMPLETED flag is released, not {flag.phase.value}")
    released = dataclasses.replace(flag, released=True, reason=reason, switch_position=switch_position)
    return await write_flag(store, released, flag.version)
