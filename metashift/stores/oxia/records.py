"""``Records``: Oxia's records of the store's namespace, one at a time on its shard (read, put)
or listed over every shard, and the store's ``Stat`` of a record's version (its layout: see
``operations``)."""

from __future__ import annotations

import asyncio
from typing import Any

from metashift.stores.oxia.proto import client_pb2 as pb

from ..errors import AlreadyExists, BadVersion, MetadataStoreError, StoreUnavailable
from ..stat import Stat
from .batcher import Batcher
from .connection import OxiaConnection
from .keys import Keys
from .session import Sessions, owner_id


class Records:
    """Reads, puts and lists the namespace's records, on the shard of each key, sharing requests
    among the calls of one event-loop turn (``batcher``); ephemerals on the store's sessions."""

    def __init__(self, conn: OxiaConnection, keys: Keys, sessions: Sessions) -> None:
        self._conn = conn
        self._keys = keys
        self._sessions = sessions
        self.batcher = Batcher(conn)

    def stat(self, path: str, version: Any) -> Stat:
        """The store's ``Stat`` of a record's ``Version``."""
        ephemeral = version.HasField("session_id")
        identity = version.client_identity if version.HasField("client_identity") else None
        shard = self._conn.shard_for(self._keys.key(path)).id if ephemeral else 0
        owner = owner_id(identity, shard, version.session_id) if ephemeral else 0
        # Ours = our identity AND the session we hold on its shard now. Pulsar's rule (the
        # identity alone) reads a lost session's records as ours until the server expires them,
        # up to a session timeout after it is back: a registration checked then vanishes later.
        own = ephemeral and identity == self._sessions.identity and self._sessions.holds(shard, version.session_id)
        return Stat(
            path, int(version.modifications_count), int(version.created_timestamp), int(version.modified_timestamp),
            ephemeral=ephemeral, created_by_self=own, owner=owner,
        )

    # ---- records --------------------------------------------------------------------------------

    async def get(self, path: str, *, value: bool = True) -> Any:
        """The ``GetResponse`` of ``path``'s record, ``None`` when there is none."""
        key = self._keys.key(path)
        resp = await self.batcher.get(path, self._conn.shard_for(key), pb.GetRequest(key=key, include_value=value))
        if resp.status == pb.KEY_NOT_FOUND:
            return None
        check_status(resp.status, path)
        return resp

    async def put(
        self, path: str, value: bytes, expected_version_id: int | None, ephemeral: bool, **overrides: int
    ) -> Any:
        """One put of ``path``'s record; its ``Version``. ``UNEXPECTED_VERSION_ID`` is
        ``AlreadyExists`` for a create-only put, ``BadVersion`` otherwise."""
        key = self._keys.key(path)
        shard = self._conn.shard_for(key)
        request = pb.PutRequest(key=key, value=value)
        for name, number in overrides.items():  # override_version_id, override_modifications_count
            setattr(request, name, number)
        if expected_version_id is not None:
            request.expected_version_id = expected_version_id
        if ephemeral:
            request.session_id = await self._sessions.id_for(shard, path)
            request.client_identity = self._sessions.identity
        resp = await self.batcher.put(path, shard, request)
        if resp.status == pb.UNEXPECTED_VERSION_ID:
            raise AlreadyExists(path) if expected_version_id == -1 else BadVersion(path)
        if resp.status == pb.SESSION_DOES_NOT_EXIST:  # a new leader loading it, or expired: the keep-alive tells
            self._sessions.suspect()
            refused = StoreUnavailable(f"oxia shard {shard.id} does not know the store's session; ephemeral put "
                                       "refused", path)
            refused.write_may_have_happened = False
            raise refused
        check_status(resp.status, path)
        return resp.version

    async def list(self, path: str | None, start: str, end: str) -> list[str]:
        """The keys in ``[start, end)`` of every shard."""
        conn = self._conn
        answers = await asyncio.gather(*(
            conn.streamed(path, "List", shard, pb.ListRequest(shard=shard.id, start_inclusive=start, end_exclusive=end))
            for shard in conn.shards))
        return [key for shard_answers in answers for answer in shard_answers for key in answer.keys]


def check_status(status: int, path: str) -> None:
    if status != pb.OK:
        raise MetadataStoreError(f"oxia answered {pb.Status.Name(status)}", path)
