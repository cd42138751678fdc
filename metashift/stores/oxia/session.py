"""The Oxia session of a store: ephemeral records live on a session of their shard (Oxia's sessions
are per shard), created when the store first puts an ephemeral there (as Oxia's own clients do),
kept alive by one task, closed with the store; their state as Pulsar's session events.

A session id is the offset of the write that created it in its shard's log, so the first write of a
new shard makes a session 0; ``Stat.owner`` 0 means "persistent", so such a session is given back
and another one taken. Two shards hand out the same ids: ``Stat.owner`` carries the shard too
(``owner_id``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable

from metashift.stores.oxia.proto import client_pb2 as pb

from ..aio import wait_event
from ..errors import MetadataStoreError, StoreUnavailable
from ..notifications import SessionEvent
from .connection import OxiaConnection, SessionNotFound, Shard

log = logging.getLogger(__name__)

#: A record without a client identity: ``Stat.owner`` is its session id with its shard's id above
#: this many bits (Oxia numbers the sessions of each shard on its own, by offset in the shard's
#: log, so two shards hand out the same ids).
OWNER_SHARD_SHIFT = 48


def owner_id(identity: str | None, shard_id: int, session_id: int) -> int:
    """The ``Stat.owner`` of an ephemeral record: one number per client, whatever the shard. A
    client (this store, Pulsar's Oxia client) has a session on each shard it puts ephemerals on,
    all with its client identity: the owner is that identity's hash (never 0), so that one store
    reads as one owner, as a ZooKeeper session or an etcd lease does. Without an identity, the
    session id with its shard's id above ``OWNER_SHARD_SHIFT`` bits."""
    if identity:
        digest = int.from_bytes(hashlib.blake2b(identity.encode(), digest_size=8).digest(), "big")
        return (digest & (2**63 - 1)) or 1
    return (shard_id << OWNER_SHARD_SHIFT) | session_id


#: Oxia's bounds on a session's timeout (``common/constant``).
MIN_SESSION_TIMEOUT = 2.0
MAX_SESSION_TIMEOUT = 300.0
#: Pause before a heartbeat that failed is sent again (the shard's new leader is known within a
#: second of the old one's loss: the assignments name it).
RETRY_SECONDS = 0.5


def session_timeout(asked: float) -> float:
    """The session timeout a store asks Oxia for, within Oxia's bounds."""
    return min(max(asked, MIN_SESSION_TIMEOUT), MAX_SESSION_TIMEOUT)


def keepalive_period(asked: float) -> float:
    """Seconds between two heartbeats of a session of timeout ``asked``: a quarter of it."""
    return max(session_timeout(asked) / 4, 0.2)


class Sessions:
    """The store's session on each shard it put an ephemeral on, and the keep-alive loop."""

    def __init__(self, conn: OxiaConnection, identity: str, emit: Callable[[SessionEvent], None]) -> None:
        self._conn = conn
        self.identity = identity
        self._emit = emit
        self.timeout = session_timeout(conn.url.session_timeout)
        self.ids: dict[int, int] = {}
        """The session id on each shard that has one."""
        self._last_ok: dict[int, float] = {}
        """When each shard last answered its session's heartbeat (or made the session)."""
        self._unknown: set[int] = set()
        """Shards that answered "session not found" since their last good heartbeat."""
        self._creating: dict[int, asyncio.Future[int]] = {}
        self._lost: set[int] = set()
        """Shards whose session was lost and is to be taken again (SessionReestablished then)."""
        self._wake = asyncio.Event()
        self.on_new_session: Callable[[], None] | None = None

    def holds(self, shard_id: int, session_id: int) -> bool:
        """True when ``session_id`` is this store's live session on shard ``shard_id``."""
        return self.ids.get(shard_id) == session_id

    async def adopt(self, handed: tuple[tuple[int, int], ...]) -> bool:
        """Take over the sessions a predecessor with this identity left (shard id, session id):
        each one that still answers a heartbeat is this store's from now on. True when every
        one did (the predecessor's ephemerals are all ours); the others are gone with theirs."""
        shards = {s.id: s for s in self._conn.shards}
        kept = 0
        for shard_id, session_id in handed:
            shard = shards.get(shard_id)
            if shard is None:
                continue
            try:
                await self._beat(shard, session_id)
            except SessionNotFound:
                log.info("%s: the session handed over on shard %d has expired", self._conn.url, shard_id)
                continue
            self.ids[shard_id] = session_id
            self._last_ok[shard_id] = time.monotonic()
            kept += 1
        return bool(handed) and kept == len(handed)

    async def id_for(self, shard: Shard, path: str) -> int:
        """The session id of ``shard``, created if there is none (one creation at a time)."""
        got = self.ids.get(shard.id)
        if got is not None:
            return got
        pending = self._creating.get(shard.id)
        if pending is None:
            pending = asyncio.ensure_future(self._create(shard, path))
            self._creating[shard.id] = pending
            pending.add_done_callback(lambda _: self._creating.pop(shard.id, None))
        return await asyncio.shield(pending)

    async def _create(self, shard: Shard, path: str | None) -> int:
        conn = self._conn
        request = pb.CreateSessionRequest(
            shard=shard.id, session_timeout_ms=int(self.timeout * 1000), client_identity=self.identity)
        for _ in range(3):
            resp = await conn.unary(path, "CreateSession", shard, request)
            if resp.session_id != 0:
                self.ids[shard.id] = resp.session_id
                self._last_ok[shard.id] = time.monotonic()
                if self.on_new_session is not None:  # before any ephemeral is put on it
                    self.on_new_session()
                return int(resp.session_id)
            # session 0 would read as "no owner": give it back, take the next one
            with contextlib.suppress(MetadataStoreError):
                await conn.unary(path, "CloseSession", shard, pb.CloseSessionRequest(shard=shard.id, session_id=0))
        raise StoreUnavailable("oxia kept handing out session 0", path)

    async def keepalive_loop(self) -> None:
        """Heartbeat every session a quarter of its timeout; report ConnectionLost / Reconnected
        as the heartbeats fail and succeed again, SessionLost when a session could not be kept
        alive for longer than its timeout (the server has expired it by then), and
        SessionReestablished once every lost one was taken again.

        "Session not found" inside that time is not taken as the end of the session: a shard's
        new leader answers it until it has loaded the shard's sessions from its log (an Oxia
        cluster restarted, or a leader lost), and then keeps the session, which a client that
        had given up on it would leave to expire with its ephemerals a timeout later. A session
        the server really expired was not heartbeated for its timeout, so the client has
        counted that time already."""
        conn = self._conn
        interval = keepalive_period(self.timeout)
        unsure = False
        while not conn.closed:
            # a heartbeat that failed is sent again soon, to the shard's leader of then
            await wait_event(self._wake, min(interval, RETRY_SECONDS) if unsure else interval)
            self._wake.clear()
            shards = {s.id: s for s in conn.shards}
            beats = [(shards[i], sid) for i, sid in list(self.ids.items()) if i in shards]
            results = await asyncio.gather(*(self._beat(s, sid) for s, sid in beats), return_exceptions=True)
            now = time.monotonic()
            unsure = unreachable = False
            for (shard, sid), result in zip(beats, results, strict=True):
                if result is None:
                    self._last_ok[shard.id] = now
                    self._unknown.discard(shard.id)
                    conn.liveness.up(("keepalive", shard.id))
                    continue
                if isinstance(result, StoreUnavailable):
                    unreachable = True
                    conn.liveness.down(("keepalive", shard.id))
                elif not isinstance(result, SessionNotFound):
                    log.warning("%s: keep-alive of session %d failed: %s", conn.url, sid, result)
                unsure = True
                if now - self._last_ok.get(shard.id, now) > self.timeout:  # the server has expired it by now
                    self.forget(shard.id, sid)
                elif isinstance(result, SessionNotFound) and shard.id not in self._unknown:
                    self._unknown.add(shard.id)
                    log.info("%s: shard %d does not know session %d (a new leader loading its sessions?); "
                             "asking again until its timeout", conn.url, shard.id, sid)
            if self._lost and not unreachable:
                await self._take_again(shards)

    async def _beat(self, shard: Shard, session_id: int) -> None:
        await self._conn.unary(None, "KeepAlive", shard, pb.SessionHeartbeat(shard=shard.id, session_id=session_id))

    def suspect(self) -> None:
        """A call was refused for a session the shard did not know: heartbeat now, to find out
        whether it is a new leader not yet knowing it or the session is gone."""
        self._wake.set()

    def forget(self, shard_id: int, session_id: int) -> None:
        """The session ``session_id`` of shard ``shard_id`` is gone: SessionLost (once), and the
        keep-alive loop takes a new one."""
        if self.ids.get(shard_id) != session_id:
            return
        del self.ids[shard_id]
        if not self._lost:
            self._emit(SessionEvent.SESSION_LOST)
        self._lost.add(shard_id)

    async def _take_again(self, shards: dict[int, Shard]) -> None:
        for shard_id in sorted(self._lost):
            if shard_id in shards and shard_id not in self.ids:
                try:
                    await self.id_for(shards[shard_id], "/")
                except MetadataStoreError as e:
                    log.debug("%s: could not take a new session on shard %d: %s", self._conn.url, shard_id, e)
                    return
        self._lost.clear()
        self._emit(SessionEvent.SESSION_REESTABLISHED)

    async def close(self) -> None:
        """Close every session (the server deletes their ephemerals at once)."""
        shards = {s.id: s for s in self._conn.shards}
        ids, self.ids = self.ids, {}
        conn = self._conn

        async def close_one(shard: Shard, session_id: int) -> None:
            request = pb.CloseSessionRequest(shard=shard.id, session_id=session_id)
            try:
                await shard_call(conn, shard, request)
            except Exception as e:  # the server expires it anyway
                log.warning("%s: could not close session %d: %s", conn.url, session_id, e)

        await asyncio.gather(*(close_one(shards[i], sid) for i, sid in ids.items() if i in shards))


async def shard_call(conn: OxiaConnection, shard: Shard, request: pb.CloseSessionRequest) -> None:
    """``CloseSession`` on ``shard``'s leader, bounded by 3 s (a close must end)."""
    stub = conn.stub(shard)
    await stub.CloseSession(request, timeout=min(conn.timeout, 3.0), metadata=conn.metadata)
