"""The gateway's ``Session`` stream (``metashift.v1.Session/Open``): a client's session with the
agent. It starts with ``Hello``, lives as long as the client's keep-alives come within its timeout,
carries the session's events (connection lost, reconnected, lost) to the client, and ends by the
client's ``CloseSession``, its stream closing, a malformed message or the agent shutting down; a
session that ended takes its ephemerals with it (``SessionRegistry``)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from metashift.agent.core.router import Router
from metashift.agent.core.sessions import ClientSession, SessionRegistry
from metashift.agent.gateway.errors import Malformed, abort
from metashift.agent.metrics import AgentMetrics
from metashift.proto import wire
from metashift.proto.errors import InvalidArgument
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores.errors import StoreUnavailable

HELLO_TIMEOUT = 10.0


class SessionStreams:
    """Serves the ``Session/Open`` calls."""

    def __init__(
        self, router: Router, registry: SessionRegistry, metrics: AgentMetrics, *, node_id: str, role: str,
        session_timeout: float, session_max_timeout: float,
    ) -> None:  # fmt: skip
        self.router = router
        self.registry = registry
        self.metrics = metrics
        self.node_id = node_id
        self.role = role
        self.session_timeout = session_timeout
        self.session_max_timeout = session_max_timeout
        self._streams: set[asyncio.Queue[tuple[Any, ...]]] = set()
        self._closing = False

    async def serve(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        """One session, from its Hello to its end."""
        try:
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT)
        except TimeoutError:
            await abort(context, InvalidArgument("no Hello within 10 seconds"))
            return
        if first is grpc.aio.EOF:
            return
        if isinstance(first, Malformed) or first.WhichOneof("kind") != "hello":
            await abort(context, InvalidArgument("a session starts with Hello"))
            return
        if self._closing:
            await abort(context, StoreUnavailable("the agent is shutting down"))
            return
        hello = first.hello
        timeout = hello.timeout_ms / 1000 if hello.timeout_ms else self.session_timeout
        timeout = min(max(timeout, 0.5), self.session_max_timeout)
        out: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        session = self.registry.open(hello.client_name[:200], timeout, lambda ev: out.put_nowait(("event", ev)))
        session.on_expired = lambda: out.put_nowait(("expired",))
        self.metrics.sessions.set(len(self.registry))
        self._streams.add(out)
        reader = asyncio.create_task(self._read(context, session, out))
        reason = "stream broken"
        try:
            started = pb.SessionStarted(
                session_id=session.id, timeout_ms=int(timeout * 1000),
                max_value_size=self.router.active.max_value_size, node_id=self.node_id, role=self.role,
            )  # fmt: skip
            await context.write(pb.SessionResponse(started=started))
            while True:
                try:
                    item = await asyncio.wait_for(out.get(), max(session.expires_in(), 0.01))
                except TimeoutError:
                    if session.expires_in() > 0:
                        continue
                    reason = "keep-alive timed out"
                    await self._end(session, reason)
                    await context.write(pb.SessionResponse(event=pb.SessionEvent(type=pb.SESSION_LOST)))
                    return
                kind = item[0]
                if kind == "keepalive":
                    await context.write(pb.SessionResponse(keep_alive=pb.KeepAlive(seq=item[1])))
                elif kind == "event":
                    event = pb.SessionEvent(type=wire.SESSION_EVENT_TO_PB[item[1]])
                    await context.write(pb.SessionResponse(event=event))
                elif kind == "expired":  # the registry ended it (an ephemeral of it vanished)
                    reason = "expired by the agent"
                    await context.write(pb.SessionResponse(event=pb.SessionEvent(type=pb.SESSION_LOST)))
                    return
                elif kind == "close":
                    reason = "closed by the client"
                    await self._end(session, reason)
                    await context.write(pb.SessionResponse(closed=pb.SessionClosed()))
                    return
                elif kind == "eof":
                    reason = "stream closed"
                    return
                elif kind == "shutdown":
                    reason = "agent shutting down"
                    return
                elif kind == "bad":
                    reason = "malformed request"
                    await self._end(session, reason)
                    await abort(context, InvalidArgument(item[1]))
                    return
        finally:
            reader.cancel()
            self._streams.discard(out)
            if not session.ended:
                self.registry.end_soon(session, reason)
            self.metrics.sessions.set(len(self.registry))

    async def _end(self, session: ClientSession, reason: str) -> None:
        """End ``session`` in a task of its own: a client that goes away meanwhile (its stream
        cancelled) must not cut the deletion of its ephemerals short."""
        await asyncio.shield(self.registry.end_soon(session, reason))

    async def _read(
        self, context: grpc.aio.ServicerContext, session: ClientSession, out: asyncio.Queue[tuple[Any, ...]]
    ) -> None:
        try:
            while True:
                msg = await context.read()
                if msg is grpc.aio.EOF:
                    out.put_nowait(("eof",))
                    return
                if isinstance(msg, Malformed):
                    out.put_nowait(("bad", msg.reason))
                    return
                kind = msg.WhichOneof("kind")
                session.touch()
                if kind == "keep_alive":
                    out.put_nowait(("keepalive", msg.keep_alive.seq))
                elif kind == "close":
                    out.put_nowait(("close",))
                    return
                else:
                    out.put_nowait(("bad", f"unexpected {kind or 'empty'} message in an open session"))
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # the stream broke under us: the writer side notices too
            out.put_nowait(("eof",))

    def shutdown(self) -> None:
        """End every session stream (the agent is going away); new ones are refused."""
        self._closing = True
        for out in list(self._streams):
            out.put_nowait(("shutdown",))
