"""A connection's answers, in the order of its requests, written together.

Answers are made in any order (a forwarded read comes back while a held write still waits, reads
of a run are served side by side); each request takes its place in line when it arrives, and the
answers at the head of the line that are ready go out in one socket write, once per turn of the
event loop; the answer to a connection's only request in flight goes at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from metashift.stores.aio import wait_event


class Slot:
    """One request's place in line; ``data``: its framed answer once made."""

    __slots__ = ("close_after", "data")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.close_after = False


class Replies:
    """The line of one connection's answers (see the module)."""

    __slots__ = ("_close", "_empty", "_line", "_loop", "_scheduled", "_send")

    def __init__(self, send: Callable[[bytes, int], None], close: Callable[[], None]) -> None:
        self._send = send
        self._close = close
        self._line: deque[Slot] = deque()
        self._scheduled = False
        self._loop = asyncio.get_running_loop()
        self._empty = asyncio.Event()
        self._empty.set()

    def take(self) -> Slot:
        """A place in line for the request that just arrived."""
        slot = Slot()
        self._line.append(slot)
        self._empty.clear()
        return slot

    def fill(self, slot: Slot, data: bytes) -> None:
        """``slot``'s answer is made; it goes out once every answer before it has."""
        slot.data = data
        line = self._line
        if len(line) == 1 and line[0] is slot and not self._scheduled:
            self._flush()  # the connection's only request: its answer goes now, not a turn later
            return
        if not self._scheduled and line and line[0].data is not None:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    @property
    def waiting(self) -> int:
        """Requests whose answers have not gone out yet."""
        return len(self._line)

    async def drained(self, within: float) -> None:
        """Wait (up to ``within`` seconds) until every answer in line has gone out."""
        await wait_event(self._empty, within)

    def flush(self) -> None:
        """Send the answers at the head of the line that are ready, now."""
        if self._line and self._line[0].data is not None:
            self._flush()

    def _flush(self) -> None:
        self._scheduled = False
        out: list[bytes] = []
        close = False
        line = self._line
        while line and line[0].data is not None:
            slot = line.popleft()
            out.append(slot.data)  # type: ignore[arg-type]
            if slot.close_after:
                close = True
                break
        if not line:
            self._empty.set()
        if out:
            self._send(b"".join(out), len(out))
        if close:
            line.clear()
            self._close()
