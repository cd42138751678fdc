"""The gateway's ``Calls`` stream: the unary calls (Get, GetChildren, Exists, Put, Delete, Batch)
made as messages of one stream. A unary call costs grpc.aio several times what a stream message
costs (a bare echo server here: 830 against 440 µs of CPU a call at 200 calls a second), and a
broker's metadata client makes its calls one after another. Each message is answered by the
same handler as its unary call, with the stream's metadata (the session) and the request's own
deadline; the answer carries the request's id, and a failure its ``Error`` detail."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from metashift.agent.gateway.errors import Failure, Malformed, abort
from metashift.proto.errors import InvalidArgument
from metashift.proto.v1 import gateway_pb2 as pb

#: One method's handler as the gateway runs it (``Gateway._answering``): (request, context) ->
#: its response, or the ``Failure`` it ended with.
Answer = Callable[[Any, Any], Awaitable[Any]]


class CallContext:
    """What a handler reads of its call, for a call made on a Calls stream: the stream's metadata
    and the deadline the request carries (``timeout_ms``, 0: none)."""

    __slots__ = ("_deadline", "_metadata")

    def __init__(self, metadata: Any, timeout_ms: int) -> None:
        self._metadata = metadata
        self._deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None

    def invocation_metadata(self) -> Any:
        return self._metadata

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())


class CallStreams:
    """Serves the ``Calls`` streams: every request in a task of its own, answered as it ends."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        #: the request's oneof field -> how the gateway answers that method
        self._answers = answers

    async def serve(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        """One stream, until the client ends it (its calls in flight answered first) or goes."""
        metadata = context.invocation_metadata()
        sending = asyncio.Lock()
        tasks: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        ended = False
        try:
            while True:
                request = await context.read()
                if request is grpc.aio.EOF:
                    break
                kind = None if isinstance(request, Malformed) else request.WhichOneof("call")
                if kind is None:
                    reason = request.reason if isinstance(request, Malformed) else "a call names no operation"
                    await abort(context, InvalidArgument(reason))
                    return
                task = loop.create_task(self._one(request, kind, metadata, context, sending))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            # the client sent its last call: answer those in flight, then end the stream
            while tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            ended = True
        finally:
            if not ended:  # the stream was cancelled or broke: nobody waits for the answers
                for task in tasks:
                    task.cancel()

    async def _one(
        self, request: Any, kind: str, metadata: Any, context: grpc.aio.ServicerContext, sending: asyncio.Lock
    ) -> None:
        call = CallContext(metadata, request.timeout_ms)
        try:
            # past its deadline the call is cancelled, as gRPC cancels a unary call's handler: a
            # write already handed to the store goes on (``WriteGate.run``), its caller has gone
            async with asyncio.timeout(request.timeout_ms / 1000 if request.timeout_ms else None):
                response = await self._answers[kind](getattr(request, kind), call)
        except TimeoutError:
            return  # the caller's own deadline has passed too: nobody waits for an answer
        if isinstance(response, Failure):
            out = pb.CallResponse(id=request.id, error=response.detail)
        else:
            out = pb.CallResponse(id=request.id, **{kind: response})
        async with sending:  # one write at a time on a stream
            with contextlib.suppress(Exception):  # the client went away: nobody to answer
                await context.write(out)
