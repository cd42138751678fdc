"""The write gate: the one place where the agent holds writes while a migration runs.

Open, writes flow to the router's active store. ``close()`` stops admitting writes — new ones wait
in line — and returns once the writes already in flight have finished (their number is returned:
"drained"). ``open(towards=store)`` routes to ``store`` and releases the held writes one after
another, in the order they arrived, then lets everything flow concurrently again. A held write
whose caller's deadline (or ``hold_timeout``) comes first fails with ``HeldForMigration`` and
writes nothing.

A fence (``fence_with``: the migration participant's heartbeat lease) says whether writes may be
acknowledged at all: while it says no, new writes wait as if the gate were closed (and the
fence's owner is told, so that it closes the gate and looks again), and a write that ends then
answers WriteOutcomeUnknown instead of success: it may have reached the store after a
coordinator went on without this agent.

Reads are held too, while writes are held for a migration (the freeze) and while the fence says
no (``readable``; nothing queues them: they wait for the gate to reopen or the fence to hold, then
read from the store the gate opened towards). A read answered from the frozen source while
another agent already released its writes into the target, or by an agent that a migration went
on without (its lease lapsed), would be stale: the histories of the clients would not be
linearizable. The freeze lasts a fraction of a second, so a read waits at most that long in the
normal course.

The gate is in one ``GateState`` at a time (``gate_states``: every legal move listed once, each move
checked against it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from metashift.agent.core.gate_states import FLOWING, READABLE, SHUTTING_DOWN, GateState, check_move
from metashift.agent.core.router import Router
from metashift.proto.errors import HeldForMigration, WriteOutcomeUnknown
from metashift.stores import MetadataStore
from metashift.stores.aio import wait_event

log = logging.getLogger(__name__)

T = TypeVar("T")


#: How often a held read looks again at the fence (a lease comes back by time and heartbeat, not by
#: a move of the gate); a move of the gate wakes it at once.
READ_RECHECK_SECONDS = 0.05


def _orphan_done(task: asyncio.Task[Any]) -> None:
    """The end of an admitted write whose caller went away (its deadline passed): nobody else will
    look at its outcome, so log it (its caller was told the outcome is unknown)."""
    if task.cancelled():
        return
    err = task.exception()
    if err is not None:
        log.warning("a write whose caller went away ended with %s: %s", type(err).__name__, err)


class _Ticket:
    __slots__ = ("admitted", "done", "go", "since")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.go: asyncio.Future[None] = loop.create_future()
        self.done = asyncio.Event()
        self.since = time.monotonic()
        self.admitted = False
        """Released and counted in flight (by the releaser, before the writer has even resumed)."""


class WriteGate:
    """Holds writes while the gate is closed and releases them in order; see the module."""

    def __init__(
        self,
        router: Router,
        *,
        hold_timeout: float,
        on_change: Callable[[WriteGate], None] | None = None,
        on_released: Callable[[float], None] | None = None,
    ) -> None:
        self.router = router
        self.hold_timeout = hold_timeout
        self._state = GateState.OPEN
        self._held: deque[_Ticket] = deque()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._release_task: asyncio.Task[int] | None = None
        self._runs: set[asyncio.Task[object]] = set()
        self._on_change = on_change
        self._on_released = on_released
        """Told how long each held write waited, when it is let through (the write-hold metric)."""
        self.drained_total = 0
        self.held_total = 0
        self.expired_total = 0
        self._lease: Callable[[], bool] | None = None
        self._on_lapse: Callable[[], None] | None = None
        self._moved = asyncio.Event()
        """Set at every move of the gate (and a fence restored): held reads look again."""
        self.reads_held_total = 0
        self.reads_expired_total = 0

    def fence_with(self, lease: Callable[[], bool], on_lapse: Callable[[], None]) -> None:
        """Admit and acknowledge writes only while ``lease()`` is true; call ``on_lapse`` when a
        write finds it false (its owner then closes the gate and reopens it once it may)."""
        self._lease, self._on_lapse = lease, on_lapse

    def _leased(self) -> bool:
        if self._lease is None or self._lease():
            return True
        if self._on_lapse is not None:
            self._on_lapse()
        return False

    def _check_lease(self) -> None:
        """After a write: its success may be told only while the lease holds."""
        if not self._leased():
            raise WriteOutcomeUnknown(
                "the agent's migration heartbeat lapsed while the write ran: it may have reached the store "
                "after a migration went on without this agent; read before retrying"
            )

    # ---- state ----------------------------------------------------------------------------------

    @property
    def state(self) -> GateState:
        return self._state

    def _move(self, new: GateState) -> None:
        """Go to ``new``, if ``gate_states.TRANSITIONS`` allows it from here."""
        self._state = check_move(self._state, new)

    @property
    def is_open(self) -> bool:
        """The gate admits writes (releasing held ones counts as open)."""
        return self._state in (GateState.OPEN, GateState.RELEASING, GateState.STOPPING)

    @property
    def shutting_down(self) -> bool:
        """``shutdown`` was called: writes that would wait fail at once."""
        return self._state in SHUTTING_DOWN

    def _must_wait(self) -> bool:
        return self._state not in FLOWING or bool(self._held) or not self._leased()

    @property
    def held(self) -> int:
        return sum(1 for t in self._held if not t.go.done())

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _changed(self) -> None:
        self.wake_readers()
        if self._on_change is not None:
            self._on_change(self)

    def wake_readers(self) -> None:
        """Held reads look again now (the gate moved, or the fence's owner restored the lease)."""
        self._moved.set()
        self._moved = asyncio.Event()

    # ---- the read path --------------------------------------------------------------------------

    def reads_flow(self) -> bool:
        """A read may be answered now, from ``router.active``."""
        return self._state in READABLE and self._leased()

    async def readable(self, wait: float | None = None) -> MetadataStore:
        """The store to read from, once reads may be answered (at once unless the gate is closed
        for a freeze or the fence says no). ``wait`` as for a write; past it, or when the agent
        stops with the gate closed, ``HeldForMigration`` (nothing was read: retry)."""
        if self.reads_flow():
            return self.router.active
        self.reads_held_total += 1
        since = time.monotonic()
        deadline = since + (self.hold_timeout if wait is None else max(wait, 0.0))
        while not self.reads_flow():
            if self._state is GateState.STOPPED:
                raise HeldForMigration("the write gate is closed and the agent is shutting down")
            left = deadline - time.monotonic()
            if left <= 0:
                self.reads_expired_total += 1
                raise HeldForMigration(
                    f"read held for migration for {time.monotonic() - since:.3f}s, past the caller's deadline"
                )
            await wait_event(self._moved, min(READ_RECHECK_SECONDS, left))
        return self.router.active

    # ---- the write path -------------------------------------------------------------------------

    @asynccontextmanager
    async def write(self, wait: float | None = None) -> AsyncIterator[MetadataStore]:
        """Admit one write; yields the store to write to. ``wait``: the seconds the caller can
        still wait (its deadline), however long; ``None`` (no deadline) means ``hold_timeout``."""
        ticket: _Ticket | None = None
        if self._must_wait():
            ticket = await self._hold(wait)  # returns admitted: already counted in flight
        else:
            self._enter()
        try:
            yield self.router.active
            self._check_lease()
        finally:
            self._leave()
            if ticket is not None:
                ticket.done.set()

    async def run(self, fn: Callable[[MetadataStore], Awaitable[T]], wait: float | None = None) -> T:
        """Admit one write as ``write`` does (a caller that goes away while held leaves the line and
        writes nothing), then run ``fn(store)`` to its end in a task of its own: once admitted, a
        write is not cut short by its caller going away (deadline passed, stream cancelled) — the
        store may already have applied it — so what follows it (bookkeeping of ephemerals) still
        happens, and the gate counts it in flight until it has really finished."""
        ticket: _Ticket | None = None
        if self._must_wait():
            ticket = await self._hold(wait)
        else:
            self._enter()
        store = self.router.active

        async def admitted() -> T:
            try:
                result = await fn(store)
                self._check_lease()
                return result
            finally:
                self._leave()
                if ticket is not None:
                    ticket.done.set()

        task = asyncio.get_running_loop().create_task(admitted())
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():  # the caller went away: what the write ends with is still observed
                task.add_done_callback(_orphan_done)
            raise

    def try_enter(self) -> MetadataStore | None:
        """Admit one write now, without a task and without waiting, when writes flow and none is
        held: the store to write to (the caller calls ``leave`` when the write has ended, however
        it ended). ``None``: nothing admitted, the write takes ``run`` (it may have to wait)."""
        if self._must_wait():
            return None
        self._enter()
        return self.router.active

    def leave(self) -> None:
        """The end of a write that ``try_enter`` admitted (its caller then asks ``lease_holds``
        before it tells the write's success)."""
        self._leave()

    def lease_holds(self) -> bool:
        """Whether a write that has just succeeded may be told so: the lease still holds (``run``
        and ``write`` ask themselves). False also tells the fence's owner (``on_lapse``)."""
        return self._leased()

    def _enter(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    def _admit(self, ticket: _Ticket) -> None:
        """Give a held write its turn. It counts as in flight from this moment, not from when its
        coroutine resumes, so that a ``close`` in between drains it instead of letting it slip
        through to the store after ``close`` returned."""
        ticket.admitted = True
        self._enter()
        ticket.go.set_result(None)
        if self._on_released is not None:
            self._on_released(time.monotonic() - ticket.since)

    async def _hold(self, wait: float | None) -> _Ticket:
        if self.shutting_down:
            raise HeldForMigration("the write gate is closed and the agent is shutting down")
        ticket = _Ticket(asyncio.get_running_loop())
        self._held.append(ticket)
        self.held_total += 1
        self._changed()
        limit = self.hold_timeout if wait is None else wait  # the caller's deadline, when it set one
        try:
            await asyncio.wait_for(asyncio.shield(ticket.go), max(limit, 0.0))
            return ticket
        except TimeoutError:
            if ticket.go.done() and not ticket.go.cancelled() and ticket.go.exception() is None:
                return ticket  # released at the very moment the deadline came
            self._forget(ticket)
            self.expired_total += 1
            raise HeldForMigration(
                f"write held for migration for {time.monotonic() - ticket.since:.3f}s, past the caller's deadline"
            ) from None
        except asyncio.CancelledError:
            if ticket.admitted:  # released, then cancelled before it could run: it leaves the flight
                self._leave()
                ticket.done.set()
            else:
                self._forget(ticket)
            raise
        finally:
            self._changed()

    def _forget(self, ticket: _Ticket) -> None:
        try:
            self._held.remove(ticket)
        except ValueError:  # already released: let the release loop move on
            ticket.done.set()
        if not ticket.go.done():
            ticket.go.cancel()

    # ---- driving the gate -----------------------------------------------------------------------

    async def close(self, within: float | None = None) -> int:
        """Stop admitting writes; wait (up to ``within`` seconds) until the writes in flight are done.
        Returns how many were drained. Raises ``TimeoutError`` when they did not finish in time
        (the gate stays closed)."""
        self._move(GateState.STOPPED if self.shutting_down else GateState.CLOSED)
        if self._release_task is not None and not self._release_task.done():
            self._release_task.cancel()
        drained = self._in_flight
        log.info("write gate closed; draining %d write(s) in flight", drained)
        self._changed()
        await asyncio.wait_for(self._idle.wait(), within)
        self.drained_total += drained
        self._changed()
        return drained

    async def open(self, towards: MetadataStore | None = None) -> int:
        """Route to ``towards`` (default: stay on the active store), then release the held writes
        there in arrival order; returns how many were released in order."""
        if towards is not None:
            await self.router.switch_watching(towards)
        while True:
            if self.shutting_down:  # nothing is held any more; writes flow but never wait
                self._move(GateState.STOPPING)
                self._changed()
                return 0
            running = self._release_task
            if running is None or running.done():
                break
            if self._state is GateState.RELEASING:
                # already releasing: that release hands the held writes out one after another; a
                # second loop beside it would let them run side by side, out of order
                self._changed()
                try:
                    return await asyncio.shield(running)
                except asyncio.CancelledError:
                    if running.cancelled():
                        return 0
                    raise
            await asyncio.wait([running])  # a release cancelled by close: let it wind down first
        if not self._held:
            if self._state is not GateState.OPEN:  # said every time it opens: the freeze's end in the logs
                log.info("write gate open towards %s; released 0 held write(s)", self.router.active_name)
            self._move(GateState.OPEN)
            self._changed()
            return 0
        self._move(GateState.RELEASING)
        self._changed()
        task = asyncio.create_task(self._release(len(self._held)))
        self._release_task = task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # closed again while releasing
                return 0
            raise

    async def _release(self, count: int) -> int:
        released = 0
        try:
            for _ in range(count):
                if self._state is not GateState.RELEASING or not self._held:
                    break
                ticket = self._held.popleft()
                if ticket.go.done():
                    continue
                self._admit(ticket)
                released += 1
                await ticket.done.wait()
            if self._state is GateState.RELEASING:  # the rest (arrived while releasing) flow concurrently, in order
                while self._held:
                    ticket = self._held.popleft()
                    if not ticket.go.done():
                        self._admit(ticket)
                        released += 1
            log.info("write gate open towards %s; released %d held write(s)", self.router.active_name, released)
            return released
        finally:
            if self._state is GateState.RELEASING:
                self._move(GateState.OPEN)
            self._changed()

    def shutdown(self) -> int:
        """The agent is going away: fail every held write now, and from now on every write that
        would have to wait. Returns how many held writes failed."""
        self._move(GateState.STOPPING if self.is_open else GateState.STOPPED)
        return self.fail_held()

    def fail_held(self) -> int:
        """Fail every held write now."""
        failed = 0
        while self._held:
            ticket = self._held.popleft()
            if not ticket.go.done():
                ticket.go.set_exception(HeldForMigration("the agent is shutting down"))
                failed += 1
        self._changed()
        return failed
