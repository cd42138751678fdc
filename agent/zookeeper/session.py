"""ZooKeeper sessions. Each one IS an agent client session (``SessionRegistry.open``): the
ephemerals it creates are tracked there, deleted when it ends, and re-created in the migration
target at PREPARATION like those of the gRPC clients.

A ZooKeeper session outlives its TCP connection: a client that reconnects within its timeout with
the session id and password gets it back (same ephemerals, same watches; events that fired while
it was away are delivered on re-attach). A session that hears nothing for its timeout expires:
its ephemerals are deleted (through the write gate) and a later reconnect is told it expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from metashift.agent.core.handover import CarriedSession
from metashift.agent.core.sessions import ClientSession, SessionRegistry
from metashift.stores import SessionEvent
from metashift.stores.zookeeper.wire import ChildInfo

log = logging.getLogger(__name__)

#: Pending watch events kept for a session while no connection is attached.
MAX_PENDING_EVENTS = 10_000
REAP_INTERVAL = 0.2


class Connection(Protocol):
    """What a session needs of the TCP connection it is attached to."""

    def send(self, data: bytes) -> None: ...

    def close(self) -> None: ...


@dataclass(eq=False)
class ZkSession:
    """One ZooKeeper client session served by the agent: an agent client session under the hood."""

    id: int
    passwd: bytes
    timeout_ms: int
    client: ClientSession
    conn: Connection | None = None
    pending: list[bytes] = field(default_factory=list)
    auth: list[ChildInfo] = field(default_factory=list)
    closing: bool = False
    carried: bool = False
    """Carried over from a predecessor process: the watches its client sets again may have missed
    events while no agent served it (``set_watches`` fires them)."""

    @property
    def alive(self) -> bool:
        return not self.client.ended and not self.closing

    def send_event(self, data: bytes) -> None:
        if self.conn is not None:
            self.conn.send(data)
        elif len(self.pending) < MAX_PENDING_EVENTS:
            self.pending.append(data)


class ZkSessions:
    """Every ZooKeeper session of the agent, by id; expires the silent ones."""

    def __init__(
        self, registry: SessionRegistry, *, min_timeout_ms: int, max_timeout_ms: int,
        on_end: Callable[[ZkSession], None] | None = None,
    ) -> None:
        self.registry = registry
        self.min_timeout_ms = min_timeout_ms
        self.max_timeout_ms = max_timeout_ms
        self.by_id: dict[int, ZkSession] = {}
        self._by_client: dict[str, ZkSession] = {}
        self._on_end = on_end
        self._reaper: asyncio.Task[None] | None = None
        # ZooKeeper puts its server id in the top byte; ours: random, positive, never 0
        self._id_base = (int.from_bytes(os.urandom(2), "big") & 0x7FFF) << 48
        self._next = 1

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap(), name="zk-session-reaper")

    def negotiate(self, requested_ms: int) -> int:
        return min(max(requested_ms, self.min_timeout_ms), self.max_timeout_ms)

    def open(self, requested_ms: int, name: str) -> ZkSession:
        timeout_ms = self.negotiate(requested_ms)
        sid = self._id_base | self._next
        self._next += 1
        while sid in self.by_id:  # one carried over from a predecessor
            sid = self._id_base | self._next
            self._next += 1
        holder: list[ZkSession] = []
        client = self.registry.open(f"zk:{name}:{sid:#x}", timeout_ms / 1000, lambda ev: self._store_event(holder, ev))
        session = ZkSession(sid, secrets.token_bytes(16), timeout_ms, client)
        client.on_expired = lambda: self._expired(session)
        holder.append(session)
        self.by_id[sid] = session
        self._by_client[client.id] = session
        journal = self.registry.journal
        if journal is not None:  # before the client hears of it
            journal.opened(CarriedSession(client.id, client.name, client.timeout, sid, session.passwd))
        return session

    def restore(self, carried: CarriedSession, ephemerals: dict[str, bytes], last_seen: float) -> ZkSession:
        """A session a predecessor process served (``handover``), with the ephemerals it owns:
        its client may re-attach with its id and password, as to a ZooKeeper server; it expires
        ``timeout`` after ``last_seen`` if the client does not come back."""
        holder: list[ZkSession] = []
        client = self.registry.restore(carried.id, carried.name, carried.timeout,
                                       lambda ev: self._store_event(holder, ev), ephemerals, last_seen)
        session = ZkSession(carried.zk_id, carried.zk_passwd, int(carried.timeout * 1000), client, carried=True)
        client.on_expired = lambda: self._expired(session)
        holder.append(session)
        self.by_id[session.id] = session
        self._by_client[client.id] = session
        return session

    def find(self, session_id: int, passwd: bytes) -> ZkSession | None:
        """The live session ``session_id`` if ``passwd`` is its password."""
        session = self.by_id.get(session_id)
        if session is None or not session.alive or not secrets.compare_digest(session.passwd, passwd):
            return None
        return session

    def owner_id(self, client: ClientSession | None) -> int:
        if client is None:
            return 0
        session = self._by_client.get(client.id)
        return session.id if session is not None else 0

    def attach(self, session: ZkSession, conn: Connection) -> None:
        old = session.conn
        session.conn = conn
        session.client.touch()
        if old is not None and old is not conn:
            old.close()
        pending, session.pending = session.pending, []
        for data in pending:
            conn.send(data)

    def detach(self, session: ZkSession, conn: Connection) -> None:
        if session.conn is conn:
            session.conn = None

    async def close(self, session: ZkSession, reason: str) -> None:
        """End ``session`` (closeSession, expiry): its ephemerals are deleted through the gate."""
        if session.closing:
            return
        session.closing = True
        self._forget(session)
        await asyncio.shield(self.registry.end_soon(session.client, reason))

    def _forget(self, session: ZkSession) -> None:
        self.by_id.pop(session.id, None)
        self._by_client.pop(session.client.id, None)
        if self._on_end is not None:
            self._on_end(session)

    def _expired(self, session: ZkSession) -> None:
        """The session expired (silent past its timeout, or expired by the registry): drop its
        connection, so that the client reconnects and is told its session expired (it then makes
        a new one and registers again)."""
        conn, session.conn = session.conn, None
        session.closing = True
        self._forget(session)
        if conn is not None:
            conn.close()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_INTERVAL)
            for session in list(self.by_id.values()):
                if session.client.ended:  # ended by the registry (agent stopping)
                    self._forget(session)
                elif session.client.expires_in() <= 0 and not session.closing:
                    log.info("zookeeper session %#x expired (no packet for %d ms)", session.id, session.timeout_ms)
                    self._expired(session)
                    self.registry.end_soon(session.client, "zookeeper session expired")

    def _store_event(self, holder: list[ZkSession], event: SessionEvent) -> None:
        # The agent's own store session: ZooKeeper clients hear nothing of it (their session is
        # the agent's; an outage shows as slow or failed requests, ConnectionLoss on a write).
        if holder:
            log.debug("zookeeper session %#x: store event %s", holder[0].id, event.value)

    async def shutdown(self, *, hand_over: bool = False) -> None:
        """The agent stops: close every connection and end every session (their ephemerals go);
        with ``hand_over``, the sessions stay (in the state file and on the store) for the next
        process, which the clients reconnect to."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(BaseException):
                await self._reaper
        for session in list(self.by_id.values()):
            if session.conn is not None:
                session.conn.close()
                session.conn = None
            if hand_over:
                continue
            session.closing = True
            self._forget(session)
            self.registry.end_soon(session.client, "agent stopping")
