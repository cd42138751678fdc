"""The ZooKeeper session's state as Pulsar's session events, with the lost timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiozk.states import States

from ..notifications import SessionEvent


class SessionEvents:
    """Maps aiozk's session states onto Pulsar's session events.

    Like Pulsar's ZKSessionWatcher, a connection lost for 5/6 of the session timeout is declared
    SessionLost without waiting for a server to say so (none may be reachable): past that point
    our ephemerals may be gone and another node may own what they claimed.
    """

    def __init__(
        self,
        session_timeout: float,
        session_id: Callable[[], int | None],
        emit: Callable[[SessionEvent], None],
        on_restored: Callable[[], None],
    ) -> None:
        self._session_timeout = session_timeout
        self._session_id = session_id
        self._emit = emit
        self._on_restored = on_restored
        self._closed = False
        self._connected_once = False
        self._session_id_seen: int | None = None
        self._lost_timer: asyncio.TimerHandle | None = None
        self._declared_lost = False

    def transition(self, old: str, new: str) -> None:
        """aiozk's session went from state ``old`` to ``new`` (called inside aiozk)."""
        if self._closed:
            return
        events: list[SessionEvent] = []
        sid = self._session_id()
        loop = asyncio.get_running_loop()
        if new == States.SUSPENDED:
            events.append(SessionEvent.CONNECTION_LOST)
            if self._lost_timer is None:
                self._lost_timer = loop.call_later(self._session_timeout * 5 / 6, self._declare_session_lost)
        elif new == States.LOST and old != States.LOST:
            self._cancel_lost_timer()
            if not self._declared_lost:
                events.append(SessionEvent.SESSION_LOST)
            self._declared_lost = True
        elif new == States.CONNECTED:
            self._cancel_lost_timer()
            if not self._connected_once:
                self._connected_once = True
            elif self._declared_lost:
                if sid == self._session_id_seen:  # the server kept it after all
                    events.append(SessionEvent.RECONNECTED)
                events.append(SessionEvent.SESSION_REESTABLISHED)
            elif old == States.SUSPENDED and sid == self._session_id_seen:
                events.append(SessionEvent.RECONNECTED)
            else:
                events.append(SessionEvent.SESSION_REESTABLISHED)
            self._declared_lost = False
            self._session_id_seen = sid
            if events:
                self._on_restored()
        for event in events:
            loop.call_soon(self._emit, event)

    def close(self) -> None:
        """No more events from here on."""
        self._closed = True
        self._cancel_lost_timer()

    def _declare_session_lost(self) -> None:
        self._lost_timer = None
        if self._closed or self._declared_lost:
            return
        self._declared_lost = True
        self._emit(SessionEvent.SESSION_LOST)

    def _cancel_lost_timer(self) -> None:
        if self._lost_timer is not None:
            self._lost_timer.cancel()
            self._lost_timer = None
