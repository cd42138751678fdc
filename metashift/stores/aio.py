"""asyncio helpers shared by the stores, the client and the agent."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

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


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a new uvloop event loop (plain asyncio where uvloop is missing):
    the one runner of the command line, the agent and Spark's driver and executors."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep working without it
        return asyncio.run(coro)
    return uvloop.run(coro)
