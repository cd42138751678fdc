"""Oxia notifications: a ``GetNotifications`` stream on every shard of the namespace while the
store has listeners (Oxia streams a shard's every change; the listeners' subtrees are picked out
here), resumed after the last offset seen whenever it breaks (server restart, leader move), so no
change is lost while the server keeps its notifications (an hour by default). A stream broken for
longer than a keep-alive period (a server down, not a shard's leader moving) is a
``ConnectionLost``, its return a ``Reconnected`` (``Liveness``): the listeners read again, as an
etcd store's do after a compaction. Created / Modified / Deleted, plus ChildrenChanged of the
parent on create and delete (Pulsar's ``OxiaMetadataStore.notificationCallback``); Oxia says
Created for a put whose ``modifications_count`` is 0, so a record restored with an overridden
count is announced as Modified.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import grpc

from metashift.stores.oxia.proto import client_pb2 as pb

from .. import paths
from ..aio import cancel_and_wait
from ..errors import MetadataStoreError
from ..notifications import Notification, NotificationType
from .connection import OxiaConnection, Shard, open_stream, settle, started
from .keys import Keys

log = logging.getLogger(__name__)

_TYPES = {pb.KEY_CREATED: NotificationType.CREATED, pb.KEY_MODIFIED: NotificationType.MODIFIED,
          pb.KEY_DELETED: NotificationType.DELETED}


class Notifications:
    """The notification streams of a store, one per shard, and the gate that holds the store's
    calls until every stream has its starting offset."""

    def __init__(self, conn: OxiaConnection, keys: Keys, notify: Callable[[Notification], None]) -> None:
        self._conn = conn
        self._keys = keys
        self._notify = notify
        self._tasks: list[asyncio.Task[None]] = []
        self._ready: dict[int, asyncio.Event] = {}
        self._calls: dict[int, Any] = {}

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        """Open a stream on every shard; the store's calls wait until each has its start."""
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        gate = asyncio.Event()
        self._conn.gate = gate
        self._ready = ready = {shard.id: asyncio.Event() for shard in self._conn.shards}
        for shard in self._conn.shards:
            task = loop.create_task(self._loop(shard.id, ready[shard.id], self._calls),
                                    name=f"oxia-notifications {shard.id}")
            self._tasks.append(task)
        if not self._ready:
            gate.set()
        else:
            self._tasks.append(loop.create_task(self._open_gate(gate), name="oxia-notifications-gate"))

    async def _open_gate(self, gate: asyncio.Event) -> None:
        try:
            await self.wait_ready(self._conn.timeout)
        finally:
            gate.set()

    async def wait_ready(self, within: float) -> None:
        """Until every stream got its starting offset (at most ``within`` seconds)."""
        waits = [asyncio.ensure_future(e.wait()) for e in self._ready.values() if not e.is_set()]
        if waits:
            try:
                await asyncio.wait(waits, timeout=within)
            finally:
                for wait in waits:
                    wait.cancel()

    def detach(self) -> Callable[[], Coroutine[Any, Any, None]]:
        """Stop delivering at once (a new ``start`` may follow right away); the returned function
        closes the streams."""
        tasks, self._tasks = self._tasks, []
        calls, self._calls = self._calls, {}
        ready, self._ready = self._ready, {}
        self._conn.gate = None
        conn = self._conn

        async def close() -> None:
            await cancel_and_wait(tasks, f"{conn.url} notifications")
            await asyncio.gather(*(settle(call) for call in calls.values()))
            if not self._tasks:  # (none started since)
                for shard_id in ready:
                    conn.liveness.up(("notifications", shard_id))

        return close

    async def stop(self) -> None:
        """Close every stream."""
        await self.detach()()

    async def _loop(self, shard_id: int, ready: asyncio.Event, calls: dict[int, Any]) -> None:
        conn = self._conn
        offset: int | None = None  # the last offset seen: a resumed stream starts after it
        while not conn.closed:
            shard = next((s for s in conn.shards if s.id == shard_id), None)
            if shard is None:  # the shard went (a split): nothing more to follow there
                return
            request = pb.NotificationsRequest(shard=shard_id)
            if offset is not None:
                request.start_offset_exclusive = offset
            if not shard.leader:  # being elected: the next assignments name the new leader
                conn.liveness.down(("notifications", shard_id))
                await asyncio.sleep(0.5)
                continue
            call = open_stream(conn.stub(shard).GetNotifications, request, metadata=conn.metadata)
            calls[shard_id] = call
            probe = None if offset is None else asyncio.ensure_future(self._probe(shard, call))
            try:
                while True:
                    batch = await call.read()
                    if batch is grpc.aio.EOF:
                        break
                    offset = batch.offset
                    started(call)
                    ready.set()
                    conn.liveness.up(("notifications", shard_id))
                    for entry in batch.notifications:
                        self._deliver(entry)
            except asyncio.CancelledError:
                call.cancel()
                raise
            except grpc.aio.AioRpcError as e:
                if not conn.closed:
                    log.debug("%s: notification stream of shard %d broke: %s", conn.url, shard_id,
                              conn.token.scrub(e.details() or ""))
            except Exception:
                log.exception("%s: notification stream of shard %d failed", conn.url, shard_id)
            finally:
                if probe is not None:
                    probe.cancel()
            await settle(call)
            if conn.closed:
                return
            conn.liveness.down(("notifications", shard_id))
            await asyncio.sleep(0.5)

    async def _probe(self, shard: Shard, call: Any) -> None:
        """A resumed stream sends nothing until the next change: a read of the shard answered
        says its leader serves again, and so the stream."""
        conn = self._conn
        while True:
            try:
                await conn.streamed(None, "Read", shard, pb.ReadRequest(shard=shard.id))
            except MetadataStoreError:
                await asyncio.sleep(0.5)
                continue
            started(call)
            conn.liveness.up(("notifications", shard.id))
            return

    def _deliver(self, entry: Any) -> None:
        path = self._keys.path_of(entry.key)
        kind = _TYPES.get(entry.value.type)
        if path is None:
            return
        if kind is None:  # a delete of a range: never written by Pulsar's store nor by ours
            log.debug("%s: ignoring %s of %s", self._conn.url, pb.NotificationType.Name(entry.value.type), path)
            return
        self._notify(Notification(kind, path))
        if kind != NotificationType.MODIFIED:
            parent = paths.parent(path)
            if parent is not None:
                self._notify(Notification(NotificationType.CHILDREN_CHANGED, parent))
