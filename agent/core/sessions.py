"""Client sessions: who holds a Session stream, and which ephemerals each one created.

Every ephemeral a client creates through the agent is ephemeral on the agent's own store session
too, so that it vanishes if the agent dies. On top of that the agent tracks, per client session,
the ephemerals it created and their latest value, so that it can:

- delete them when the client's session ends (stream closed or broken, keep-alive timed out), so
  each client's ephemerals live exactly as long as its own session, independently of the others;
- re-create them in another store (the migration target) with ``recreate_in``;
- after a store outage (SessionLost, then the store back), find which of them still exist under
  the agent's store session (``revalidate``) before telling the clients, and keep deleting those
  with their client's session.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.handover import CarriedSession, StateFile
from metashift.proto.errors import HeldForMigration
from metashift.stores import MetadataStore, SessionEvent, Stat
from metashift.stores.errors import (
    BadVersion,
    MetadataStoreError,
    NotFound,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

EventSink = Callable[[SessionEvent], None]


@dataclass(eq=False)
class ClientSession:
    """One client's Session stream: its keep-alive deadline and the ephemerals it owns."""

    id: str
    name: str
    timeout: float
    sink: EventSink
    ephemerals: dict[str, bytes] = field(default_factory=dict)
    """Real path -> latest value of every ephemeral this session owns."""
    last_seen: float = field(default_factory=time.monotonic)
    ended: bool = False
    on_expired: Callable[[], None] | None = None
    """How the front tells its client the agent expired the session (``SessionRegistry.expire``):
    gRPC ends the stream with SESSION_LOST, ZooKeeper drops the connection and tells the
    reconnect that the session expired."""

    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def expires_in(self) -> float:
        return self.last_seen + self.timeout - time.monotonic()


class SessionRegistry:
    """Every open client session, who owns which ephemeral, and the deletion of a session's ephemerals."""

    def __init__(
        self, gate: WriteGate, *, on_change: Callable[[int], None] | None = None, journal: StateFile | None = None
    ) -> None:
        self.gate = gate
        self.journal = journal
        """The state file that carries the ZooKeeper sessions to the next process (``handover``)."""
        self.sessions: dict[str, ClientSession] = {}
        self._owner: dict[str, ClientSession] = {}
        self._ids = itertools.count(1)
        self._prefix = f"{os.getpid():x}-{int(time.time() * 1000):x}"
        self._on_change = on_change
        self._cleanups: set[asyncio.Task[int]] = set()
        self._unsure = False
        """The store declared our session lost: the tracked ephemerals are checked when it is back."""
        self._events: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def ephemeral_count(self) -> int:
        """Ephemerals tracked for client sessions, all sessions together."""
        return len(self._owner)

    # ---- life cycle -----------------------------------------------------------------------------

    def open(self, name: str, timeout: float, sink: EventSink) -> ClientSession:
        session = ClientSession(f"{self._prefix}-{next(self._ids)}", name, timeout, sink)
        self.sessions[session.id] = session
        if self.journal is not None:  # a successor deletes its ephemerals if it cannot carry it
            self.journal.opened(CarriedSession(session.id, name, timeout))
        self._changed()
        log.info("session %s opened (%s, timeout %.1fs)", session.id, name or "-", timeout)
        return session

    def restore(self, session_id: str, name: str, timeout: float, sink: EventSink, ephemerals: dict[str, bytes],
                last_seen: float) -> ClientSession:
        """A session a predecessor process served, carried over with the ephemerals it owns
        (checked by the caller to be ephemerals of the agent's store session)."""
        session = ClientSession(session_id, name, timeout, sink, dict(ephemerals), last_seen)
        self.sessions[session.id] = session
        for path in ephemerals:
            self._owner[path] = session
        self._changed()
        log.info("session %s carried over (%s, timeout %.1fs, %d ephemeral(s))", session.id, name or "-",
                 timeout, len(ephemerals))
        return session

    def get(self, session_id: str) -> ClientSession | None:
        session = self.sessions.get(session_id)
        return None if session is None or session.ended else session

    async def end(self, session: ClientSession, reason: str) -> int:
        """End ``session`` and delete its ephemerals (through the write gate, so during a migration
        the deletes wait for the gate like any write). Returns how many were deleted."""
        if session.ended:
            return 0
        session.ended = True
        self.sessions.pop(session.id, None)
        self._changed()
        paths = list(session.ephemerals)
        for path in paths:
            if self._owner.get(path) is session:
                del self._owner[path]
        deleted = 0
        left: list[str] = []
        for path in paths:
            outcome = await self._delete_ephemeral(path)
            if outcome is True:
                deleted += 1
            elif outcome is None:
                left.append(path)
        session.ephemerals.clear()
        if self.journal is not None:  # after the deletes: a successor deletes what a kill or a stop left
            self.journal.ended(session.id, left)
        log.info("session %s ended (%s); %d ephemeral(s) deleted", session.id, reason, deleted)
        return deleted

    def end_soon(self, session: ClientSession, reason: str) -> asyncio.Task[int]:
        """``end`` in a task of its own (the caller may be being cancelled)."""
        task = asyncio.get_running_loop().create_task(self.end(session, reason))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanup_done)
        return task

    def expire(self, session: ClientSession, reason: str) -> asyncio.Task[int]:
        """End ``session`` as its store would expire it: its remaining ephemerals are deleted and
        its client is told (``on_expired``), so that it makes a new session and registers again.
        The agent does this when one of the session's ephemerals vanished from the store without
        the client's doing: ZooKeeper promises an ephemeral lives exactly as long as its session."""
        log.warning("expiring session %s (%s): %s", session.id, session.name or "-", reason)
        task = self.end_soon(session, reason)
        if session.on_expired is not None:
            session.on_expired()
        return task

    def _cleanup_done(self, task: asyncio.Task[int]) -> None:
        self._cleanups.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("ending a session failed", exc_info=task.exception())

    async def _delete_ephemeral(self, path: str) -> bool | None:
        """True: deleted; False: gone already or no longer ours; None: left in the store (the
        agent stops, or the store would not answer)."""
        for attempt in range(20):
            try:
                async with self.gate.write(wait=None) as store:
                    got = await store.get(path)
                    if got is None or not got[1].ephemeral or not got[1].created_by_self:
                        return False  # gone already, or no longer ours
                    if self._owner.get(path) is not None:
                        return False  # re-created by another session of this agent meanwhile
                    await store.delete(path, expected_version=got[1].version)
                    return True
            except (NotFound, BadVersion):
                return False
            except HeldForMigration:
                if self.gate.shutting_down:  # the gate stays closed: the store session takes it
                    log.info("not deleting ephemeral %s: the write gate is closed and the agent stops", path)
                    return None
                log.info("deleting ephemeral %s waits for the write gate", path)
            except StoreUnavailable as e:
                log.warning("cannot delete ephemeral %s yet (%s); retrying", path, e)
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
            except MetadataStoreError:
                log.exception("cannot delete ephemeral %s", path)
                return None
        log.error("gave up deleting ephemeral %s; it goes with the agent's store session", path)
        return None

    def delete_left(self, paths: list[str] | tuple[str, ...]) -> asyncio.Task[int]:
        """Delete ephemerals of the agent's store session that no session owns (left by a
        predecessor process), through the write gate, in a task."""
        async def delete_all() -> int:
            return sum([await self._delete_ephemeral(path) is True for path in paths])

        task = asyncio.get_running_loop().create_task(delete_all())
        self._cleanups.add(task)
        task.add_done_callback(self._cleanup_done)
        return task

    async def wait_cleanups(self) -> None:
        if self._cleanups:
            await asyncio.gather(*list(self._cleanups), return_exceptions=True)

    # ---- bookkeeping of writes ------------------------------------------------------------------

    def record_put(self, session: ClientSession | None, value: bytes, ephemeral: bool, stat: Stat) -> None:
        path = stat.path
        owner = self._owner.get(path)
        if ephemeral and stat.ephemeral and session is not None and (owner is None or stat.version == 0):
            if owner is not None and owner is not session:
                owner.ephemerals.pop(path, None)
                if self.journal is not None:
                    self.journal.dropped(owner.id, path)
            self._owner[path] = session
            session.ephemerals[path] = value
            if self.journal is not None:  # before the answer: a kill now leaves it to the successor
                self.journal.owned(session.id, path)
        elif owner is not None and not stat.ephemeral:
            self.record_delete(path)  # deleted behind our back and made persistent: no one's ephemeral
        elif owner is not None:
            owner.ephemerals[path] = value  # a new value for a tracked ephemeral

    def record_delete(self, path: str) -> None:
        owner = self._owner.pop(path, None)
        if owner is not None:
            owner.ephemerals.pop(path, None)
            if self.journal is not None:
                self.journal.dropped(owner.id, path)

    def owner_of(self, path: str) -> ClientSession | None:
        """The client session that owns the ephemeral ``path`` (None: not one this agent tracks)."""
        return self._owner.get(path)

    def owns(self, session: ClientSession | None, path: str) -> bool:
        return session is not None and self._owner.get(path) is session

    def ephemerals(self) -> dict[str, bytes]:
        """Every tracked ephemeral (path -> value), all sessions together."""
        return {path: session.ephemerals[path] for path, session in self._owner.items()}

    async def recreate_in(self, store: MetadataStore, *, read_from: MetadataStore | None = None) -> int:
        """Create every tracked ephemeral in ``store`` (ephemeral on ``store``'s session), with its
        latest value and version, at its real path. Returns how many were created.

        Each one is read from the active store first (or ``read_from``: where a predecessor
        process served them from; the gate is closed or no member served yet: nothing changes
        there meanwhile): one that is gone, or is no longer an ephemeral of the agent's session
        there (deleted behind the agent's back, replaced by a persistent node), is forgotten
        instead of being re-created."""
        made = 0
        active = read_from if read_from is not None else self.gate.router.active
        for path, value in self.ephemerals().items():
            version = 0
            if active is not store:
                got = await active.get(path)
                if got is None or not got[1].ephemeral or not got[1].created_by_self:
                    if self._unsure:  # the store session is being taken again: revalidate decides
                        log.info("not re-creating ephemeral %s yet: the agent's session in %s is "
                                 "being re-established", path, active.url)
                        continue
                    log.info("not re-creating ephemeral %s: it is no longer ours in %s", path, active.url)
                    self.record_delete(path)
                    continue
                value, version = got[0], got[1].version
            there = await store.get(path) if active is not store else None
            if there is not None and there[1].ephemeral:
                if there[1].created_by_self and there[0] == value and there[1].version == version:
                    made += 1  # this agent's before a restart (the same session, resumed): once is enough
                    continue
                if not there[1].created_by_self:
                    # a copy made before a restart on a session that was not resumed: it would go
                    # when that session expires, so it is replaced by one of this session's
                    with contextlib.suppress(NotFound, BadVersion):
                        await store.delete(path, expected_version=there[1].version)
            # Keep its version too: a broker's compare-and-set on its own ephemeral (Pulsar's
            # ResourceLock) uses the version it read before the switch. Every put names the node
            # ephemeral: on etcd a put without the lease would make it persistent.
            stat = await store.put(path, value, ephemeral=True)
            while stat.version < version:
                stat = await store.put(path, value, expected_version=stat.version, ephemeral=True)
            made += 1
        log.info("re-created %d ephemeral(s) in %s", made, store.url)
        return made

    # ---- events from the agent's own store session ----------------------------------------------

    def store_event(self, event: SessionEvent) -> None:
        """Forward the agent's store session event to every client, in order.

        SessionLost does not make the agent forget its clients' ephemerals: the store session may
        have survived (a ZooKeeper ensemble that was down itself expires no session). When the
        store is back (Reconnected, SessionReestablished) the agent first checks which of them
        still exist as ephemerals of its own store session, keeps tracking those (they are still
        deleted when their client's session ends) and forgets the rest; only then does it pass the
        event on, so that a client checking ``created_by_self`` on it gets the truth."""
        if event is SessionEvent.SESSION_LOST:
            self._unsure = True
        check = self._unsure and event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED)
        if check:
            self._unsure = False
        previous = self._events
        task = asyncio.get_running_loop().create_task(self._deliver(previous, event, check))
        self._events = task
        task.add_done_callback(self._delivered)

    async def _deliver(self, previous: asyncio.Task[None] | None, event: SessionEvent, check: bool) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        expired = await self.revalidate() if check else set()
        for session in list(self.sessions.values()):
            if session not in expired:
                session.sink(event)

    def _delivered(self, task: asyncio.Task[None]) -> None:
        if self._events is task:
            self._events = None
        if not task.cancelled() and task.exception() is not None:
            log.error("forwarding a store session event failed", exc_info=task.exception())

    async def revalidate(self) -> set[ClientSession]:
        """Check every tracked ephemeral is still an ephemeral of the agent's own store session
        now; the client session of one that is not (the store expired the agent's session, or
        someone replaced the node) is expired (``expire``): its client must learn that its
        registration is gone, as its own ZooKeeper session would have told it. Returns the
        sessions expired."""
        store = self.gate.router.active
        lost: dict[ClientSession, str] = {}
        for path, owner in list(self._owner.items()):
            try:
                got = await store.get(path)
            except MetadataStoreError as e:  # the store went away again: keep it, check next time
                log.warning("cannot check ephemeral %s after the store came back (%s)", path, e)
                self._unsure = True
                continue
            if got is None or not got[1].ephemeral or not got[1].created_by_self:
                log.info("ephemeral %s did not survive the store outage", path)
                self.record_delete(path)
                lost.setdefault(owner, path)
        for session, path in lost.items():
            self.expire(session, f"its ephemeral {path} did not survive the store outage")
        log.info("%d client ephemeral(s) survived the store outage; %d session(s) expired",
                 len(self._owner), len(lost))
        return set(lost)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self.sessions))
