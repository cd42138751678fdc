"""The client's side of the agent's ``Calls`` stream: calls sent as messages of one stream, each
matched to its answer by id (``metashift.v1.CallRequest``). A unary gRPC call costs the Python
client and the agent several times a stream message, and a broker makes its metadata calls one
after another.

The stream is opened on the first call and again after it ended; it carries the session metadata
it was opened with, so a new session gets a new stream (the old one ends once its calls are
answered). When the stream breaks, every call in flight fails with the stream's error, as a unary
call cut off would: a write's outcome is then unknown."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

import grpc

from metashift.proto.v1 import gateway_pb2 as pb

log = logging.getLogger(__name__)


class CallsEnded(Exception):
    """The agent ended the Calls stream (no status error) while a call was in flight."""


class _Stream:
    """One open Calls stream and the calls in flight on it."""

    def __init__(self, call: Any, metadata: Any) -> None:
        self.call = call
        self.metadata = metadata
        self.pending: dict[int, asyncio.Future[pb.CallResponse]] = {}
        self.sending = asyncio.Lock()
        self.failure: BaseException | None = None
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                response = await self.call.read()
                if response is grpc.aio.EOF:
                    self._fail(CallsEnded("the agent ended the call stream"))
                    return
                waiter = self.pending.pop(response.id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(response)
        except grpc.aio.AioRpcError as err:
            self._fail(err)
        except asyncio.CancelledError:
            self._fail(CallsEnded("the call stream was closed"))
            raise
        except Exception as err:  # a broken stream in any other way: the calls cannot be answered
            self._fail(CallsEnded(f"the call stream broke: {err!r}"))

    def _fail(self, failure: BaseException) -> None:
        self.failure = failure
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(failure)

    @property
    def open(self) -> bool:
        return self.failure is None and not self.reader.done()


class CallStream:
    """Calls on the agent's ``Calls`` stream; ``open_call(metadata)`` opens one."""

    def __init__(self, open_call: Callable[[Any], Any]) -> None:
        self._open_call = open_call
        self._stream: _Stream | None = None
        self._ids = itertools.count(1)
        self._finishing: set[asyncio.Task[None]] = set()
        #: False once the agent answered that it has no Calls method (the client then makes unary calls)
        self.supported = True

    def _current(self, metadata: Any) -> _Stream:
        stream = self._stream
        if stream is not None and stream.open and stream.metadata is metadata:
            return stream
        if stream is not None and stream.open:  # another session: the old stream ends once answered
            task = asyncio.get_running_loop().create_task(_finish(stream))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)
        stream = self._stream = _Stream(self._open_call(metadata), metadata)
        return stream

    async def call(self, kind: str, request: Any, timeout: float | None, metadata: Any) -> pb.CallResponse:  # noqa: ASYNC109 - also sent to the agent
        """Send ``request`` as the ``kind`` call and wait at most ``timeout`` seconds for its answer.
        Raises ``grpc.aio.AioRpcError`` or ``CallsEnded`` when the stream broke, ``TimeoutError``."""
        stream = self._current(metadata)
        call_id = next(self._ids)
        waiter: asyncio.Future[pb.CallResponse] = asyncio.get_running_loop().create_future()
        stream.pending[call_id] = waiter
        timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
        message = pb.CallRequest(id=call_id, timeout_ms=timeout_ms, **{kind: request})
        try:
            async with asyncio.timeout(timeout):
                async with stream.sending:
                    if stream.failure is not None:
                        raise stream.failure
                    await stream.call.write(message)
                return await waiter
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.supported = False  # an older agent
            raise
        except (grpc.aio.UsageError, asyncio.InvalidStateError) as err:  # written to a stream that ended
            raise stream.failure or CallsEnded(f"the call stream ended: {err!r}") from None
        finally:
            stream.pending.pop(call_id, None)

    async def close(self) -> None:
        """End the stream (the calls in flight are answered first, for a bounded time)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await _finish(stream)
        for task in list(self._finishing):
            await task


async def _finish(stream: _Stream, within: float = 10.0) -> None:
    """Tell the agent no more calls come on ``stream``, wait for its answers, then drop it."""
    with contextlib.suppress(Exception):
        async with stream.sending:
            await stream.call.done_writing()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(asyncio.shield(stream.reader), within)
    stream.reader.cancel()
    stream.call.cancel()
