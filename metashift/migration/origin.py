"""Where a store's cluster came from: the origin record a coordinator writes into the target of a
migration just before COMPLETED (``{"epoch", "sourceUrl", "completedAt"}``).

With the flag it tells, for any store, whether the cluster lives there: the flag records the
last migration *from* the store, the origin the last migration *into* it. A COMPLETED flag whose
epoch is above the origin's means the cluster left (follow ``targetUrl``); an origin above the
flag means it came back. The next migration from the store takes an epoch above both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from metashift.stores import MetadataStore

from . import paths
from .flag import MigrationFlag, now_ms, read_flag, read_legacy_flag


@dataclass(frozen=True)
class Origin:
    """The migration that brought the cluster into this store."""

    epoch: int
    source_url: str
    completed_at: int = 0

    def to_json(self) -> bytes:
        body = {"epoch": self.epoch, "sourceUrl": self.source_url, "completedAt": self.completed_at}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Origin | None:
        """The record, or ``None`` when the node holds something else."""
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(body, dict):
            return None
        epoch, source = body.get("epoch"), body.get("sourceUrl")
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not isinstance(source, str):
            return None
        at = body.get("completedAt")
        return cls(epoch, source, at if isinstance(at, int) and not isinstance(at, bool) else 0)


async def read_origin(store: MetadataStore) -> Origin | None:
    """The origin record (at its place, else where an older metashift wrote it)."""
    for path in (paths.ORIGIN, paths.LEGACY_ORIGIN):
        got = await store.get(path)
        if got is not None:
            return Origin.from_json(got[0])
    return None


async def write_origin(target: MetadataStore, epoch: int, source_url: str) -> None:
    """Record in ``target`` that migration ``epoch`` from ``source_url`` completes into it."""
    await target.put(paths.ORIGIN, Origin(epoch, source_url, now_ms()).to_json())


@dataclass(frozen=True)
class StoreState:
    """What a store says about the cluster: its flag (migrations from it) and origin (into it)."""

    flag: MigrationFlag | None
    origin: Origin | None

    @property
    def arrived_epoch(self) -> int:
        return self.origin.epoch if self.origin is not None else 0

    @property
    def left_for(self) -> str | None:
        """The target the cluster left this store for, or ``None`` when it lives here."""
        if self.flag is not None and self.flag.left(self.arrived_epoch):
            return self.flag.target_url
        return None

    @property
    def released_to(self) -> str | None:
        """Where agents go: ``left_for`` once its COMPLETED flag is released (until then its
        coordinator carries the source's last changes and the agents hold their writes)."""
        return self.left_for if self.flag is not None and self.flag.released else None

    @property
    def current_flag(self) -> MigrationFlag | None:
        """The flag, unless it is history (a COMPLETED migration the cluster came back from)."""
        flag = self.flag
        if flag is not None and flag.phase.final and flag.epoch < self.arrived_epoch:
            return None
        return flag


async def read_state(store: MetadataStore) -> StoreState:
    """The store's flag and origin. With no flag at its place, a flag an older metashift left at
    PIP-454's place counts (a migration it started or completed: ``read_legacy_flag``)."""
    flag = await read_flag(store) or await read_legacy_flag(store)
    return StoreState(flag, await read_origin(store))
