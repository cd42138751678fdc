"""asyncio helpers shared by the stores, the client and the agent."""

from __future__ import annotations

import asyncio
import io
import logging
import struct
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_LENGTH = struct.Struct(">i")

#: How long a close waits for its background tasks to honour their cancellation.
CANCEL_WAIT = 5.0


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None], owner: str, within: float = CANCEL_WAIT) -> None:
    """Cancel ``tasks`` and wait until they have ended, but never longer than ``within``
    seconds: a close must end even when a task (ours or a library's) swallows its cancellation
    or waits on a peer that went silent. Such tasks are logged with their stacks and left
    behind, cancelled."""
    pending = [t for t in tasks if t is not None and not t.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return
    _, stuck = await asyncio.wait(pending, timeout=within)
    for task in stuck:
        stack = io.StringIO()
        task.print_stack(file=stack)
        log.warning("%s: task %s did not end %.0fs after it was cancelled:\n%s", owner, task.get_name(), within,
                    stack.getvalue())


def cancelled_by_caller() -> bool:
    """Whether the running task is being cancelled (``Task.cancel``). A ``CancelledError`` while it
    is not came from below: grpc.aio raises one for a call that its channel's ``close`` (or the
    call's own ``cancel``) ended, which is the call's failure, not the caller's cancellation."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


async def wait_event(event: asyncio.Event, within: float) -> bool:
    """Wait until ``event`` is set, at most ``within`` seconds; True when it is set.

    Not ``asyncio.wait_for(event.wait(), within)``: on Python 3.11 that swallows a cancellation
    that comes just as the event is set (it returns instead of raising, cpython gh-86296), and a
    loop around it then runs on for ever: an agent's stop hung on its participant's loop so.
    ``asyncio.timeout`` tells its own timeout from a cancellation."""
    try:
        async with asyncio.timeout(max(within, 0.0)):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()


def buffered_packet(reader: asyncio.StreamReader, limit: int | None = None) -> bytes | None:
    """The next packet of a length-prefixed stream (a 4-byte big-endian length, then the packet:
    ZooKeeper's framing) when ``reader`` already holds all of it, taken without awaiting; ``None``
    otherwise, and then nothing is taken (the caller awaits ``readexactly``, which also reports
    the stream's end, waits for the rest, and refuses a length that is negative or over ``limit``,
    if any).

    Why: pipelined requests and answers arrive many to one read, and two ``readexactly`` awaits
    per packet were a tenth of what the ZooKeeper front spends on a forwarded request. It reads
    CPython's ``StreamReader._buffer`` (as ``readexactly`` does), and lets the reader resume its
    transport once the buffer has room again, as ``readexactly`` does."""
    buf = reader._buffer  # type: ignore[attr-defined]
    if len(buf) < 4:
        return None
    (size,) = _LENGTH.unpack_from(buf)
    end = 4 + size
    if size < 0 or (limit is not None and size > limit) or len(buf) < end:
        return None
    with memoryview(buf) as view:
        packet = bytes(view[4:end])
    del buf[:end]
    reader._maybe_resume_transport()  # type: ignore[attr-defined]
    return packet


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a new uvloop event loop (plain asyncio where uvloop is missing):
    the one runner of the command line, the agent and Spark's driver and executors."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep working without it
        return asyncio.run(coro)
    return uvloop.run(coro)
