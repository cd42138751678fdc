"""The etcd session: a lease (TTL = the URL's session timeout) that ephemeral keys are put under,
kept alive by our own task and revoked on close; its state as Pulsar's session events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

from aetcd import rpc

from ..aio import wait_event
from ..errors import MetadataStoreError, StoreUnavailable
from ..notifications import SessionEvent
from .connection import EtcdConnection, Metadata

log = logging.getLogger(__name__)

#: Smallest lease TTL we ask for (etcd raises shorter ones to its own minimum anyway).
MIN_LEASE_TTL = 2
#: Pause between two refreshes of the lease while they fail (each after a failover).
RETRY_SECONDS = 0.5


class SessionLease:
    """The session lease of one store, and the keep-alive loop that refreshes or replaces it."""

    def __init__(self, conn: EtcdConnection, emit: Callable[[SessionEvent], None]) -> None:
        self._conn = conn
        self._emit = emit
        self.ttl = max(MIN_LEASE_TTL, math.ceil(conn.url.session_timeout))
        #: The lease's id; 0 while there is none (being re-granted).
        self.id = 0
        self._connected = True

    def require(self, path: str) -> int:
        """The lease id for an ephemeral put of ``path``; ``StoreUnavailable`` while there is none."""
        if not self.id:
            self._conn.poke.set()
            raise StoreUnavailable("etcd session lease lost, being re-granted; ephemeral put refused", path)
        return self.id

    async def grant(self) -> None:
        """Ask etcd for a new lease."""
        conn = self._conn
        request = rpc.LeaseGrantRequest(TTL=self.ttl)
        resp = await conn.call(None, lambda md: conn.lease.LeaseGrant(request, timeout=conn.timeout, metadata=md))
        if resp.error:
            raise MetadataStoreError(f"etcd refused a lease: {resp.error}")
        self.id = resp.ID

    async def adopt(self, lease_id: int) -> bool:
        """Take over ``lease_id`` (a predecessor's) if etcd still has it: refreshed at once, so its
        keys get a whole TTL again. False when it is gone (expired or revoked)."""
        conn = self._conn
        request = rpc.LeaseTimeToLiveRequest(ID=lease_id)
        resp = await conn.call(None, lambda md: conn.lease.LeaseTimeToLive(request, timeout=conn.timeout, metadata=md))
        if int(resp.TTL) <= 0:
            log.info("%s: the lease handed over has expired; granting a new one", conn.url)
            return False
        self.id = lease_id
        self.ttl = max(MIN_LEASE_TTL, int(resp.grantedTTL) or self.ttl)
        if await self._keepalive_once() <= 0:
            self.id = 0
            return False
        return True

    async def revoke_on_close(self) -> None:
        """Revoke the lease (our ephemerals vanish at once); called when the store closes."""
        conn = self._conn
        if self.id and conn.lease is not None:
            request = rpc.LeaseRevokeRequest(ID=self.id)
            timeout = min(conn.timeout, 3.0)
            try:
                # through ``call``: a token that expired while the store was idle is renewed
                await conn.call(
                    None, lambda md: conn.lease.LeaseRevoke(request, timeout=timeout, metadata=md), closing=True
                )
            except MetadataStoreError as e:
                log.warning("%s: could not revoke lease %x on close: %s", conn.url, self.id, e)
        self.id = 0

    async def _revoke(self, lease_id: int) -> None:
        conn = self._conn
        req = rpc.LeaseRevokeRequest(ID=lease_id)
        await conn.call(None, lambda md: conn.lease.LeaseRevoke(req, timeout=conn.timeout, metadata=md))

    async def _keepalive_once(self) -> int:
        """Refresh the lease once; its remaining TTL (0 when etcd no longer knows it)."""
        conn = self._conn
        lease_id = self.id

        async def refresh(md: Metadata) -> int:
            call = conn.lease.LeaseKeepAlive(
                iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=conn.timeout, metadata=md
            )
            async for reply in call:
                return int(reply.TTL)
            return 0

        return await conn.call(None, refresh)

    async def keepalive_loop(self) -> None:
        """Refresh the lease every TTL/3; report ConnectionLost/Reconnected, and SessionLost /
        SessionReestablished when the lease is gone (etcd says so, or we could not refresh it for
        longer than its TTL) and a new one was granted. Also fails over to another host.

        A refresh that fails is tried again every ``RETRY_SECONDS``, each time on the next member
        that answers (``failover``): ConnectionLost only once no refresh got through for a
        whole refresh period (TTL/3). A member's loss in a cluster (a failover within a second, an
        election within a few) is then nothing its callers hear of: the lease lives on in the
        cluster, and the watches resume after the last revision seen (``watches``), so no change
        is missed; ConnectionLost told them to read everything again for nothing."""
        conn = self._conn
        last_ok = time.monotonic()
        failing_since: float | None = None
        session_lost = False
        while not conn.closed:
            if failing_since is None:
                await wait_event(conn.poke, self.ttl / 3)
            else:
                await asyncio.sleep(RETRY_SECONDS)
            conn.poke.clear()
            channel = conn.channel
            try:
                ttl = await self._keepalive_once() if self.id else 0
            except asyncio.CancelledError:
                raise
            except MetadataStoreError as e:
                log.debug("%s: lease keep-alive failed: %s", conn.url, e)
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if self._connected and now - failing_since >= self.ttl / 3:
                    self._connected = False
                    self._emit(SessionEvent.CONNECTION_LOST)
                if not session_lost and now - last_ok > self.ttl:
                    session_lost = True
                    self._emit(SessionEvent.SESSION_LOST)
                await conn.failover(away_from=channel)  # unless a call moved it meanwhile
                continue
            except Exception:
                log.exception("%s: lease keep-alive failed", conn.url)
                continue
            failing_since = None
            last_ok = time.monotonic()
            if not self._connected:
                self._connected = True
                self._emit(SessionEvent.RECONNECTED)
            if ttl > 0 and not session_lost:
                continue
            if not session_lost:
                session_lost = True
                self._emit(SessionEvent.SESSION_LOST)
            old = self.id
            self.id = 0
            if old:  # lost locally: etcd may still hold it (a restart renews leases); drop it
                with contextlib.suppress(MetadataStoreError):
                    await self._revoke(old)
            try:
                await self.grant()
            except MetadataStoreError as e:
                log.warning("%s: could not re-grant the session lease: %s", conn.url, e)
                continue
            session_lost = False
            last_ok = time.monotonic()
            self._emit(SessionEvent.SESSION_REESTABLISHED)
