"""Oxia's single operations, in Pulsar's ``OxiaMetadataStore`` layout (pulsar-metadata 4.0.x):

- key = the path; a put first makes every missing parent an empty record (``IfRecordDoesNotExist``:
  a parent made by someone else in between is fine), as Pulsar's ``createParents`` does.
- children = ``List(path + "/", path + "//")`` on every shard (children hash to any shard), merged.
- create-only (``expected_version`` -1) = ``expected_version_id`` -1; ``AlreadyExists`` otherwise.
- ``Stat.version`` = the record's ``modifications_count`` (0 when created, +1 per put): a
  departure from Pulsar, whose ``Stat.version`` is the ``version_id`` (a shard-wide counter of
  writes, see the README). So a compare-and-set on ``n`` reads the record, checks its count is
  ``n`` and puts with ``expected_version_id`` = the ``version_id`` read, which fails if anyone
  wrote in between: two round trips, atomic all the same.
- ephemeral = a record of the store's session on its shard, with the store's client identity;
  ``created_by_self`` = that identity is ours (Pulsar's rule); ``Stat.owner`` = the session id
  with its shard's id in the top bits (``session.owner_id``: each shard numbers its own sessions).
- sequential (Pulsar's rule): a blind put of empty bytes on the parent (``/`` at top level), which
  wipes the parent's value as Pulsar's does; the child is ``path + "%010d"`` of the parent's
  ``modifications_count`` after it, created with ``IfRecordDoesNotExist`` (taken again with the
  next number when the name is already there: after a copy, names may be).
- delete refuses a node with children (``NotEmpty``: Pulsar 4.0 raises a plain
  ``MetadataStoreException("... has children")``, 4.2 ``NotEmptyException``); a missing node is
  ``NotFound`` also with an expected version (Pulsar: a bad version).
"""

from __future__ import annotations

import asyncio
from typing import Any

from metashift.stores.oxia.proto import client_pb2 as pb

from .. import paths
from ..api import MetadataStore
from ..errors import AlreadyExists, BadVersion, MetadataStoreError, NotEmpty, NotFound, StoreUnavailable
from ..ops import GetResult
from ..stat import Stat
from .batcher import Batcher
from .connection import OxiaConnection
from .keys import Keys
from .session import Sessions, owner_id

#: Largest value we accept (the server takes requests of up to 256 MiB; Pulsar's values are small,
#: ZooKeeper's limit is 1 MiB, etcd's 1.5 MiB: a copy from either always fits).
MAX_VALUE_SIZE = 4 * 1024 * 1024
#: Names a sequential put tries before giving up.
_SEQUENTIAL_ATTEMPTS = 20


class OxiaOperations(MetadataStore):
    """The ``MetadataStore`` primitives of the Oxia store, on its connection and sessions."""

    max_value_size = MAX_VALUE_SIZE
    # Pulsar's names: ten digits (the suffix is the parent's modifications count, not ZooKeeper's
    # count of child creations; the ZooKeeper front then takes Pulsar's names, as a broker does)
    zookeeper_sequential_names = True

    _conn: OxiaConnection
    _keys: Keys
    _sessions: Sessions
    _batcher: Batcher

    def _stat(self, path: str, version: Any) -> Stat:
        ephemeral = version.HasField("session_id")
        identity = version.client_identity if version.HasField("client_identity") else None
        shard = self._conn.shard_for(self._keys.key(path)).id if ephemeral and not identity else 0
        owner = owner_id(identity, shard, version.session_id) if ephemeral else 0
        own = identity is not None and identity == self._sessions.identity
        return Stat(
            path, int(version.modifications_count), int(version.created_timestamp), int(version.modified_timestamp),
            ephemeral=ephemeral, created_by_self=own, owner=owner,
        )

    # ---- records --------------------------------------------------------------------------------

    async def _record(self, path: str, *, value: bool = True) -> Any:
        """The ``GetResponse`` of ``path``'s record, ``None`` when there is none."""
        key = self._keys.key(path)
        resp = await self._batcher.get(path, self._conn.shard_for(key), pb.GetRequest(key=key, include_value=value))
        if resp.status == pb.KEY_NOT_FOUND:
            return None
        _check_status(resp.status, path)
        return resp

    async def _put_record(
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
        session = 0
        if ephemeral:
            session = await self._sessions.id_for(shard, path)
            request.session_id = session
            request.client_identity = self._sessions.identity
        resp = await self._batcher.put(path, shard, request)
        if resp.status == pb.UNEXPECTED_VERSION_ID:
            raise AlreadyExists(path) if expected_version_id == -1 else BadVersion(path)
        if resp.status == pb.SESSION_DOES_NOT_EXIST:
            self._sessions.forget(shard.id, session)
            raise StoreUnavailable("oxia session expired, being taken again; ephemeral put refused", path)
        _check_status(resp.status, path)
        return resp.version

    # ---- reads ----------------------------------------------------------------------------------

    async def _get(self, path: str) -> GetResult:
        resp = await self._record(path)
        return None if resp is None else (bytes(resp.value), self._stat(path, resp.version))

    async def _exists(self, path: str) -> bool:
        return await self._record(path, value=False) is not None

    async def _get_children(self, path: str) -> list[str]:
        start, end = self._keys.children_range(path)
        prefix = self._keys.children_prefix(path)
        names = set()
        for key in await self._list(path, start, end):
            name = key[len(prefix):]
            if name and paths.SEPARATOR not in name:  # not the node "/" itself (a parent made at top level)
                names.add(name)
        return sorted(names)

    async def _list(self, path: str | None, start: str, end: str) -> list[str]:
        """The keys in ``[start, end)`` of every shard."""
        conn = self._conn
        answers = await asyncio.gather(*(
            conn.streamed(path, "List", shard, pb.ListRequest(shard=shard.id, start_inclusive=start, end_exclusive=end))
            for shard in conn.shards))
        return [key for shard_answers in answers for answer in shard_answers for key in answer.keys]

    # ---- writes ---------------------------------------------------------------------------------

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        if expected_version is None or expected_version == -1 or sequential:
            await self._make_parents(path)
            if sequential:
                return await self._put_sequential(path, value, ephemeral)
            version = await self._put_record(path, value, expected_version, ephemeral)
            return self._stat(path, version)
        # a compare-and-set: the record exists (so do its parents), or nothing is written
        current = await self._record(path, value=False)
        if current is None or current.version.modifications_count != expected_version:
            raise BadVersion(path)
        version = await self._put_record(path, value, current.version.version_id, ephemeral)
        return self._stat(path, version)

    async def _put_sequential(self, path: str, value: bytes, ephemeral: bool) -> Stat:
        parent = paths.parent(path) or paths.SEPARATOR
        for _ in range(_SEQUENTIAL_ATTEMPTS):
            counter = await self._put_record(parent, b"", None, False)
            name = f"{path}{counter.modifications_count:010d}"
            try:
                return self._stat(name, await self._put_record(name, value, -1, ephemeral))
            except AlreadyExists:
                continue  # a name a copy brought over: the next number
        raise AlreadyExists(path, "every sequential name tried was taken")

    async def _make_parents(self, path: str) -> None:
        """Make the missing ancestors of ``path`` empty records, outermost first (Pulsar makes
        them innermost first; the end is the same, and a failure half way never leaves a record
        whose parent is missing). One read when the parent is there."""
        parent = paths.parent(path)
        if parent is None or parent == paths.SEPARATOR or await self._exists(parent):
            return
        missing = [parent]
        for ancestor in reversed(paths.ancestors(parent)):
            if await self._exists(ancestor):
                break
            missing.append(ancestor)
        for ancestor in reversed(missing):
            try:
                await self._put_record(ancestor, b"", -1, False)
            except AlreadyExists:
                pass

    async def _delete(self, path: str, expected_version: int | None) -> None:
        if await self._get_children(path):
            raise NotEmpty(path)
        key = self._keys.key(path)
        shard = self._conn.shard_for(key)
        if expected_version is None:
            resp = await self._batcher.delete(path, shard, pb.DeleteRequest(key=key))
            if resp.status == pb.KEY_NOT_FOUND:
                raise NotFound(path)
            _check_status(resp.status, path)
            return
        current = await self._record(path, value=False)
        if current is None:
            raise NotFound(path)
        if current.version.modifications_count != expected_version:
            raise BadVersion(path)
        request = pb.DeleteRequest(key=key, expected_version_id=current.version.version_id)
        resp = await self._batcher.delete(path, shard, request)
        if resp.status in (pb.UNEXPECTED_VERSION_ID, pb.KEY_NOT_FOUND):
            raise NotFound(path) if await self._record(path, value=False) is None else BadVersion(path)
        _check_status(resp.status, path)


def _check_status(status: int, path: str) -> None:
    if status != pb.OK:
        raise MetadataStoreError(f"oxia answered {pb.Status.Name(status)}", path)
