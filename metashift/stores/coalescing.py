"""Single calls made side by side, sent together: Pulsar's ``AbstractBatchedMetadataStore`` habit
(its brokers batch by default), without its delay.

A caller that has many calls in flight (a broker's managed ledgers, 32 tasks of a benchmark) pays
a whole request for each when each goes alone; through the agent's gateway that is a gRPC call
per read or write on both sides, which costs more than the store's own round trip. ``Coalescer``
collects the calls made in one turn of the event loop and, at the end of that turn, sends the
reads as one batch and the writes as another (a single call goes as it is, sent by its caller).
Nothing waits for a batch to fill: a lone call is sent in the same turn it was made. Each caller
gets its own result or error, exactly what the single call would give; a batch that fails as a
whole (the connection went, writes held past their deadline) fails each of its calls with that
error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .batching import is_write
from .ops import Op, OpResult

#: Operations per batch at most.
MAX_OPS = 256

SendOne = Callable[[Op], Awaitable[OpResult]]
#: What a call's future gets when it is the only one of its kind in its turn: send it yourself.
_ALONE = object()
SendBatch = Callable[[list[Op]], Awaitable[list[OpResult]]]


class Coalescer:
    """Sends the single calls of one event-loop turn as one batch of reads and one of writes."""

    __slots__ = ("_pending", "_scheduled", "_send_batch", "_send_one", "_tasks", "batches_sent", "ops_in_batches")

    def __init__(self, send_one: SendOne, send_batch: SendBatch) -> None:
        self._send_one = send_one
        self._send_batch = send_batch
        self._pending: list[tuple[Op, asyncio.Future[OpResult | object]]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references
        self.batches_sent = 0
        self.ops_in_batches = 0

    async def run(self, op: Op) -> OpResult:
        """Send ``op`` with the others of this turn: its result, or the error the call raises."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[OpResult | object] = loop.create_future()
        self._pending.append((op, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        result = await future  # a caller that goes away once its batch is sent leaves it sent
        if result is _ALONE:
            return await self._send_one(op)
        return result  # type: ignore[return-value]

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        reads = [p for p in pending if not is_write(p[0])]
        writes = [p for p in pending if is_write(p[0])]
        for calls in (reads, writes):
            if len(calls) == 1:
                # alone in its turn: its caller sends it as it is, from its own task (a lone
                # call, a broker's usual, pays no task of ours and no hop back from it)
                if not calls[0][1].done():
                    calls[0][1].set_result(_ALONE)
                continue
            for start in range(0, len(calls), MAX_OPS):
                task = asyncio.get_running_loop().create_task(self._send(calls[start : start + MAX_OPS]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, calls: list[tuple[Op, asyncio.Future[OpResult | object]]]) -> None:
        ops = [op for op, _ in calls]
        try:
            if len(ops) == 1:
                results = [await self._send_one(ops[0])]
            else:
                self.batches_sent += 1
                self.ops_in_batches += len(ops)
                results = await self._send_batch(ops)
        except BaseException as err:  # every call of the batch fails with it
            for _, future in calls:
                if not future.done():
                    future.set_exception(err)
            if not isinstance(err, Exception):
                raise
            return
        for (_, future), result in zip(calls, results, strict=True):
            if not future.done():
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)
