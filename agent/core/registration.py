"""This agent's participant record in its home store, and the heartbeat that keeps it alive.

The record is a sequential ephemeral (``participants/id-NNNNNNNNNN``) holding the node id, role,
address, the epoch last acknowledged and the heartbeat. Every write of it (creation, heartbeat,
acknowledgement) is a compare-and-set made one at a time, so they never race each other.

The heartbeat is also the agent's lease on writing to its home: a coordinator counts a
participant dead ``timeout`` seconds after it last saw the record change (never sooner after
the agent sent that write), so the agent acknowledges writes to its home only until
``LEASE_SHARE`` of ``timeout`` has passed since it sent its last heartbeat that succeeded
(``lease_until``). Past it, the coordinator may already have moved on without this agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

from metashift.migration import paths
from metashift.migration.liveness import LEASE_SHARE
from metashift.migration.participants import DryOpen, ParticipantRecord, sequence_order
from metashift.stores import BadVersion, MetadataStore, NotFound, Stat

log = logging.getLogger(__name__)


class Registration:
    """The record of one agent in one store; see the module."""

    def __init__(self, store: MetadataStore, record: ParticipantRecord, timeout: float) -> None:
        self.store = store
        self.record = dataclasses.replace(record, path="", version=-1, acknowledged=None, timeout=timeout)
        self.timeout = timeout
        self.lease_until = 0.0
        """Monotonic time until which this agent may acknowledge writes to ``store``."""
        self.renewed_at = 0.0
        """Monotonic time at which the write that set ``lease_until`` was sent."""
        self._lock = asyncio.Lock()

    @property
    def registered(self) -> bool:
        return bool(self.record.path)

    def fresh(self) -> bool:
        return time.monotonic() <= self.lease_until

    def _renewed(self, sent: float) -> None:
        if sent > self.renewed_at:
            self.renewed_at = sent
            self.lease_until = sent + self.timeout * LEASE_SHARE

    async def ensure(self) -> None:
        """Make sure the record exists (a lost store session took it): create it again if not."""
        async with self._lock:
            if self.record.path:
                got = await self.store.get(self.record.path)
                if got is not None and got[1].created_by_self:
                    return
                log.info("participant record %s is gone; registering again", self.record.path)
            await self._create()

    async def _create(self) -> None:
        if await self._adopt():
            return
        fresh = dataclasses.replace(self.record.beating(), acknowledged=None, path="", version=-1)
        sent = time.monotonic()
        stat = await self.store.put(paths.PARTICIPANT_PREFIX, fresh.to_json(), ephemeral=True, sequential=True)
        self.record = dataclasses.replace(fresh, path=stat.path, version=stat.version, owner=stat.owner)
        self._renewed(sent)
        log.info("registered as participant %s in %s", stat.path, self.store.url)

    async def _adopt(self) -> bool:
        """Take back this agent's own record when the store session it lives on is ours (an
        earlier process of this agent, whose session was resumed: ``handover``), so that a restart
        is the same participant to the coordinator; delete any other such record (the newest is
        kept). False when there is none."""
        mine: list[tuple[str, ParticipantRecord]] = []
        for path, value, stat in await self._own_records():
            try:
                record = ParticipantRecord.from_json(value, path, stat.version, stat.owner)
            except ValueError:
                continue
            if record.node_id == self.record.node_id:
                mine.append((path, record))
        if not mine:
            return False
        *stale, (path, found) = mine
        for old, record in stale:
            with contextlib.suppress(NotFound, BadVersion):
                await self.store.delete(old, expected_version=record.version)
        # its acknowledgement stands: the gate was closed before this process served anyone, and
        # what the freeze re-created in the target is on the target's session, resumed as well
        self.record = dataclasses.replace(self.record, path=path, version=found.version, owner=found.owner,
                                          acknowledged=found.acknowledged, heartbeat=found.heartbeat)
        log.info("took back participant record %s in %s (the same store session)", path, self.store.url)
        await self._rewrite(lambda r: r.beating())
        return True

    async def sweep(self) -> None:
        """Delete every record of this agent's own store session in this store (a home it left)."""
        for path, _value, stat in await self._own_records():
            with contextlib.suppress(NotFound, BadVersion):
                await self.store.delete(path, expected_version=stat.version)

    async def _own_records(self) -> list[tuple[str, bytes, Stat]]:
        """The participant nodes that are ephemerals of this agent's own store session, in
        registration order: (path, value, Stat)."""
        own = []
        for name in sorted(await self.store.get_children(paths.PARTICIPANTS), key=sequence_order):
            path = f"{paths.PARTICIPANTS}/{name}"
            got = await self.store.get(path)
            if got is not None and got[1].ephemeral and got[1].created_by_self:
                own.append((path, got[0], got[1]))
        return own

    async def _rewrite(self, change: Callable[[ParticipantRecord], ParticipantRecord]) -> None:
        """Compare-and-set of ``change(record)``. A version we did not expect means a write of ours
        whose answer was lost landed after all (read it back and write again), or that the record
        went with a lost session (register again, then write)."""
        for _ in range(3):
            if not self.record.path:
                await self._create()
            record = change(self.record)
            sent = time.monotonic()
            try:
                # ephemeral=True on every put: on etcd a put without the lease would make it persistent
                stat = await self.store.put(
                    self.record.path, record.to_json(), expected_version=self.record.version, ephemeral=True
                )
            except (BadVersion, NotFound):
                got = await self.store.get(self.record.path)
                if got is not None and got[1].created_by_self:
                    self.record = dataclasses.replace(self.record, version=got[1].version)
                else:
                    log.info("participant record %s is gone; registering again", self.record.path)
                    self.record = dataclasses.replace(self.record, path="", version=-1)
                continue
            self.record = dataclasses.replace(record, version=stat.version, owner=stat.owner or record.owner)
            self._renewed(sent)
            return
        raise BadVersion(self.record.path or paths.PARTICIPANTS, "participant record kept changing under its agent")

    async def beat(self) -> None:
        """One heartbeat (the record again, ``heartbeat`` + 1); registers again when it is gone."""
        async with self._lock:
            await self._rewrite(lambda r: r.beating())

    async def acknowledge(self, epoch: int) -> None:
        async with self._lock:
            if self.record.acknowledged == epoch:
                return
            await self._rewrite(lambda r: r.beating().acknowledging(epoch))
            log.info("acknowledged migration epoch %d", epoch)

    async def answer(self, dry_open: DryOpen) -> None:
        """Record the answer to a ``migrate check`` (with a heartbeat)."""
        async with self._lock:
            await self._rewrite(lambda r: r.beating().answering(dry_open))

    async def leave(self) -> None:
        """Delete the record (the agent moved its home elsewhere)."""
        async with self._lock:
            if not self.record.path:
                return
            got = await self.store.get(self.record.path)
            if got is not None and got[1].created_by_self:
                try:
                    await self.store.delete(self.record.path, expected_version=got[1].version)
                except (NotFound, BadVersion):
                    pass
            log.info("left %s (participant record %s)", self.store.url, self.record.path)
            self.record = dataclasses.replace(self.record, path="", version=-1)
            self.lease_until = 0.0
