"""What Oxia tells of a session that ephemeral records live on (``BulkStore.session_lives``).

An ephemeral record names its session (``Version.session_id``, on the record's shard) and its
client's identity, which ``Stat.owner`` is the hash of: one owner has a session on each shard it put
ephemerals on. Each session is a record of its shard, ``__oxia/session/<id, 16 hex digits>``, which
a read finds while the session lives: its value (Oxia's ``SessionMetadata``) holds the timeout the
client asked for and its identity. The record goes when the session expires or is closed.

What Oxia does not tell (neither the protocol nor that record): when a session last heard from its
client, so how long it still has, nor whether a client still sends it heartbeats. A session lapses
at most its timeout after its last heartbeat; only watching it outlive its timeout shows a live
client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from metashift.stores.oxia.proto import client_pb2 as pb

from ..bulk import SessionLife
from ..errors import MetadataStoreError
from .connection import OxiaConnection, Shard
from .keys import Keys

#: Where Oxia keeps each session of a shard (``oxiad/dataserver``'s session manager).
SESSION_KEY = "__oxia/session/{:016x}"
NOT_TOLD = ("Oxia does not tell when a session last heard from its client, nor whether one still sends it "
            "heartbeats")


async def session_lives(
    conn: OxiaConnection, keys: Keys, get: Callable[[str], Awaitable[Any]], sessions: Mapping[int, Sequence[str]],
) -> dict[int, SessionLife]:
    """``SessionLife`` of each owner of ``sessions`` (the hash of a client identity, or a shard and
    session id) from the records at its paths (``get``: a path's ``GetResponse`` or ``None``) and
    the session records they name."""
    owners = sorted(sessions)
    found = await asyncio.gather(*(_sessions_of(conn, keys, get, list(sessions[o])) for o in owners))
    wanted = {(shard.id, sid): shard for named in found for shard, sid in named}
    read = await asyncio.gather(*(_session_record(conn, shard, sid) for (_, sid), shard in wanted.items()))
    records = dict(zip(wanted, read, strict=True))
    return {owner: _life(owner, named, records) for owner, named in zip(owners, found, strict=True)}


async def _sessions_of(
    conn: OxiaConnection, keys: Keys, get: Callable[[str], Awaitable[Any]], paths: list[str],
) -> list[tuple[Shard, int]]:
    """The (shard, session id) each of ``paths``' records lives on (records gone are left out)."""
    answers = await asyncio.gather(*(get(p) for p in paths), return_exceptions=True)
    out: dict[tuple[int, int], tuple[Shard, int]] = {}
    for path, resp in zip(paths, answers, strict=True):
        if resp is None or isinstance(resp, BaseException) or not resp.version.HasField("session_id"):
            continue
        try:
            shard = conn.shard_for(keys.key(path))
        except MetadataStoreError:
            continue
        out[(shard.id, int(resp.version.session_id))] = (shard, int(resp.version.session_id))
    return list(out.values())


async def _session_record(conn: OxiaConnection, shard: Shard, session_id: int) -> tuple[bool, float | None] | None:
    """(it exists, its timeout in seconds) from the session's record; ``None`` when the read failed."""
    request = pb.ReadRequest(shard=shard.id, gets=[pb.GetRequest(key=SESSION_KEY.format(session_id),
                                                                 include_value=True)])
    try:
        answers = await conn.streamed(None, "Read", shard, request)
    except MetadataStoreError:
        return None
    gets = [g for answer in answers for g in answer.gets]
    if not gets:
        return None
    if gets[0].status == pb.KEY_NOT_FOUND:
        return False, None
    if gets[0].status != pb.OK:
        return None
    return True, metadata_timeout(gets[0].value)


def metadata_timeout(value: bytes) -> float | None:
    """The timeout (seconds) of Oxia's ``SessionMetadata`` (``uint32 timeout_ms = 1; string
    identity = 2``), read off the protobuf wire; ``None`` when it is not there."""
    i, n = 0, len(value)
    try:
        while i < n:
            tag, i = _varint(value, i)
            kind = tag & 7
            if kind == 0:
                number, i = _varint(value, i)
                if tag >> 3 == 1:
                    return number / 1000
            elif kind == 2:
                length, i = _varint(value, i)
                i += length
            elif kind == 1:
                i += 8
            elif kind == 5:
                i += 4
            else:
                return None
    except IndexError:
        return None
    return None


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def _life(
    owner: int, named: list[tuple[Shard, int]], records: dict[tuple[int, int], tuple[bool, float | None] | None],
) -> SessionLife:
    ids = ", ".join(f"{sid} on shard {shard.id}" for shard, sid in sorted(named, key=lambda x: (x[0].id, x[1])))
    name = f"session 0x{owner:x}" + (f" (Oxia session {ids})" if ids else "")
    told = [records[(shard.id, sid)] for shard, sid in named]
    if not named:  # its records are gone: with them, the session (or it was never ours to read)
        return SessionLife(owner, name, alive=False, expires_in=0.0, unknown=NOT_TOLD)
    if any(t is None for t in told):
        return SessionLife(owner, name, unknown=f"{NOT_TOLD}; its session record could not be read")
    alive = any(t[0] for t in told if t is not None)
    timeouts = [t[1] for t in told if t is not None and t[0] and t[1] is not None]
    timeout = max(timeouts) if timeouts else None
    return SessionLife(owner, name, alive=alive, expires_in=None if alive else 0.0, timeout=timeout,
                       expires_within=timeout if alive else None, within="its timeout" if timeout is not None else "",
                       unknown=NOT_TOLD)
