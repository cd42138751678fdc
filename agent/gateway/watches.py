"""The gateway's ``Watch`` stream: each stream listens to the active store under its own prefix
(``NotificationHub``), answers ``ready`` once the store's server confirmed the watch, then sends
every notification; a reader that falls ``WATCH_QUEUE_LIMIT`` behind is ended with
RESOURCE_EXHAUSTED (it has missed notifications and must re-read what it caches)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from metashift.agent.core.router import Router
from metashift.agent.gateway.errors import Malformed, abort
from metashift.agent.metrics import AgentMetrics
from metashift.proto import wire
from metashift.proto.errors import InvalidArgument
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores import MetadataStore, Notification, paths
from metashift.stores.errors import InvalidPath

WATCH_QUEUE_LIMIT = 100_000
#: Queued for a Watch stream whose reader fell WATCH_QUEUE_LIMIT notifications behind.
WATCH_OVERFLOW = "overflow"
#: What a Watch stream's queue carries: a notification, None (the agent closes), or WATCH_OVERFLOW.
WatchItem = Notification | None | str


class NotificationHub:
    """Fans the active store's notifications out to the Watch streams: each stream listens to the
    active store on its own prefix, so a store with no stream open watches nothing for them."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._queues: dict[asyncio.Queue[WatchItem], tuple[str, Callable[[], None]]] = {}
        router.on_switch(self._switched)

    def _switched(self, old: MetadataStore, new: MetadataStore) -> None:
        for queue, (prefix, remove) in list(self._queues.items()):
            remove()
            self._queues[queue] = (prefix, self._listen(new, queue, prefix))

    def _listen(self, store: MetadataStore, queue: asyncio.Queue[WatchItem], prefix: str) -> Callable[[], None]:
        def publish(notification: Notification) -> None:
            if queue.qsize() >= WATCH_QUEUE_LIMIT:
                # too slow a reader: end its stream with an error (it has missed notifications
                # and must re-read what it caches) rather than let the queue grow forever
                self.unsubscribe(queue)
                queue.put_nowait(WATCH_OVERFLOW)
                return
            queue.put_nowait(notification)

        return store.add_listener(publish, under=prefix)

    def subscribe(self, prefix: str) -> asyncio.Queue[WatchItem]:
        queue: asyncio.Queue[WatchItem] = asyncio.Queue()
        self._queues[queue] = (prefix, self._listen(self._router.active, queue, prefix))
        return queue

    async def ready(self) -> None:
        """The active store watches every stream's prefix (its server confirmed it)."""
        await self._router.active.watch_ready()

    def unsubscribe(self, queue: asyncio.Queue[WatchItem]) -> None:
        entry = self._queues.pop(queue, None)
        if entry is not None:
            entry[1]()

    def close(self) -> None:
        for queue in list(self._queues):
            self.unsubscribe(queue)
            queue.put_nowait(None)

    def __len__(self) -> int:
        return len(self._queues)


class WatchStreams:
    """Serves the ``Watch`` calls."""

    def __init__(self, router: Router, metrics: AgentMetrics) -> None:
        self.hub = NotificationHub(router)
        self.metrics = metrics

    async def serve(self, req: Any, context: grpc.aio.ServicerContext) -> None:
        """One Watch call, until the client or the agent ends it."""
        if isinstance(req, Malformed):
            await abort(context, InvalidArgument(req.reason))
            return
        prefix = req.path_prefix or paths.SEPARATOR
        try:
            wire.check_path(prefix)
        except InvalidPath as err:
            await abort(context, err)
            return
        queue = self.hub.subscribe(prefix)
        self.metrics.watchers.set(len(self.hub))
        try:
            await self.hub.ready()  # ready means: every change from now on is sent
            await context.write(pb.WatchResponse(ready=True))
            while True:
                notification = await queue.get()
                if notification is None:
                    return
                if isinstance(notification, str):  # WATCH_OVERFLOW
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"this watch fell {WATCH_QUEUE_LIMIT} notifications behind and was ended: "
                        "notifications were lost, re-read what you cache",
                    )
                    return
                note = pb.Notification(type=wire.NOTIFICATION_TO_PB[notification.type], path=notification.path)
                await context.write(pb.WatchResponse(notification=note))
        finally:
            self.hub.unsubscribe(queue)
            self.metrics.watchers.set(len(self.hub))

    def close(self) -> None:
        """End every Watch stream (the agent is going away)."""
        self.hub.close()
