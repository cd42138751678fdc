"""The client's side of the agent's Session stream (``metashift.v1.Session/Open``): the session
that the client's ephemerals live as long as.

The stream is opened with a Hello; the agent answers with the session it started (its id, the
timeout it granted, the node's name and the largest value it takes). The client then sends a
keep-alive every third of the timeout, and reads the session's events as they come. When the
stream breaks (the agent went away) it reports ConnectionLost, attaches again as soon as the
agent answers, and reports SessionLost then SessionReestablished: the old session's ephemerals
are gone, as after an expired ZooKeeper session. Closing says goodbye and waits for the agent's
answer, which comes once the session's ephemerals are deleted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores import SessionEvent
from metashift.stores.aio import cancel_and_wait
from metashift.stores.errors import MetadataStoreError, StoreUnavailable

log = logging.getLogger(__name__)


class SessionStream:
    """One client's session on the agent's Session stream (see the module)."""

    def __init__(
        self,
        open_call: Callable[..., Any],
        *,
        target: str,
        name: str,
        timeout: float,
        on_started: Callable[[pb.SessionStarted], None],
        on_event: Callable[[SessionEvent], None],
    ) -> None:
        self._open_call = open_call
        self._target = target
        self._name = name
        self.timeout = timeout
        """The session timeout asked for, then the one the agent granted (seconds)."""
        self._on_started = on_started
        self._on_event = on_event
        self._call: Any = None
        self._task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self._closed_ack = asyncio.Event()
        self._closing = False

    async def open(self) -> None:
        """Start the session (``StoreUnavailable`` or the call's ``AioRpcError`` when the agent
        does not), then keep it."""
        call, started = await self._attach(wait_for_ready=False)
        self._started(call, started)
        self._task = asyncio.create_task(self._loop(call))
        self._keepalive_task = asyncio.create_task(self._keepalive_loop())

    async def close(self, within: float) -> None:
        """End the session: the agent deletes its ephemerals before it answers (waited for at
        most ``within`` seconds)."""
        self._closing = True
        call = self._call
        if call is not None and self._task is not None and not self._task.done():
            try:  # bounded as a whole: an agent that stopped reading must not hold our close
                await asyncio.wait_for(self._say_goodbye(call), within)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError, grpc.aio.UsageError):
                pass
        await cancel_and_wait((self._keepalive_task, self._task), f"session with {self._target}")

    async def _say_goodbye(self, call: Any) -> None:
        await call.write(pb.SessionRequest(close=pb.CloseSession()))
        await call.done_writing()
        await self._closed_ack.wait()

    async def _attach(self, *, wait_for_ready: bool) -> tuple[Any, pb.SessionStarted]:
        call = self._open_call(wait_for_ready=wait_for_ready)
        try:
            hello = pb.Hello(timeout_ms=int(self.timeout * 1000), client_name=self._name)
            await call.write(pb.SessionRequest(hello=hello))
            response = await call.read()
        except BaseException:
            call.cancel()
            raise
        if response is grpc.aio.EOF or response.WhichOneof("kind") != "started":
            call.cancel()
            raise StoreUnavailable(f"the metashift agent at {self._target} did not start a session")
        return call, response.started

    def _started(self, call: Any, started: pb.SessionStarted) -> None:
        self._call = call
        self.timeout = started.timeout_ms / 1000
        self._on_started(started)

    async def _loop(self, call: Any) -> None:
        while True:
            how = await self._pump(call)
            if self._closing or how == "closed":
                return
            if how == "broken":
                self._on_event(SessionEvent.CONNECTION_LOST)
            delay = 0.05
            while True:
                try:
                    call, started = await self._attach(wait_for_ready=True)
                    break
                except (grpc.aio.AioRpcError, MetadataStoreError) as err:
                    log.debug("re-attaching to %s failed: %s", self._target, err)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
            self._started(call, started)
            if how == "broken":
                self._on_event(SessionEvent.SESSION_LOST)
            self._on_event(SessionEvent.SESSION_REESTABLISHED)

    async def _pump(self, call: Any) -> str:
        """Read the session stream until it ends: "closed" (we closed it), "lost" (the agent ended
        our session and told us so) or "broken"."""
        lost = False
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return "lost" if lost else "broken"
                kind = response.WhichOneof("kind")
                if kind == "event":
                    event = wire.SESSION_EVENT_FROM_PB.get(response.event.type)
                    if event is not None:
                        if event is SessionEvent.SESSION_LOST:
                            lost = True
                        self._on_event(event)
                elif kind == "closed":
                    self._closed_ack.set()
                    return "closed"
        except grpc.aio.AioRpcError:
            return "lost" if lost else "broken"
        except asyncio.CancelledError:  # the call was cancelled under us, or we are
            task = asyncio.current_task()
            if self._closing or (task is not None and task.cancelling()):
                raise
            return "broken"

    async def _keepalive_loop(self) -> None:
        seq = 0
        while True:
            await asyncio.sleep(max(self.timeout / 3, 0.1))
            seq += 1
            try:
                await self._call.write(pb.SessionRequest(keep_alive=pb.KeepAlive(seq=seq)))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
                pass  # the session loop notices the broken stream and re-attaches
            except Exception:
                log.debug("keep-alive write failed", exc_info=True)
