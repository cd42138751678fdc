"""What etcd tells of a lease that ephemerals live on (``BulkStore.session_lives``): its
remaining time to live and the TTL it was granted (``LeaseTimeToLive``), asked without renewing
it. What etcd does not tell: whether anyone still sends it keep-alives (a lease is not tied to a
connection), which only watching its time to live over a while shows."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aetcd import rpc

from ..bulk import SessionLife
from ..errors import MetadataStoreError
from .connection import EtcdConnection

#: What etcd cannot say of any lease.
NOT_TOLD = "etcd does not tell whether a client still renews it"


async def lease_lives(conn: EtcdConnection, owners: Iterable[int]) -> dict[int, SessionLife]:
    """``SessionLife`` of each lease id of ``owners``, asked together."""
    wanted = sorted(set(owners))
    answers = await asyncio.gather(*(_one(conn, lease) for lease in wanted))
    return dict(zip(wanted, answers, strict=True))


async def _one(conn: EtcdConnection, lease: int) -> SessionLife:
    name = f"lease 0x{lease:x}"
    request = rpc.LeaseTimeToLiveRequest(ID=lease, keys=False)
    try:
        resp = await conn.call(None, lambda md: conn.lease.LeaseTimeToLive(request, timeout=conn.timeout, metadata=md))
    except MetadataStoreError as e:
        return SessionLife(lease, name, unknown=f"etcd did not tell its time to live ({e})")
    if resp.TTL < 0:  # expired or revoked: etcd no longer knows it
        return SessionLife(lease, name, alive=False, expires_in=0.0, unknown=NOT_TOLD)
    granted = float(resp.grantedTTL) if resp.grantedTTL > 0 else None
    return SessionLife(lease, name, alive=True, expires_in=float(resp.TTL), timeout=granted, unknown=NOT_TOLD)
