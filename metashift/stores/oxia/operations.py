"""Oxia's single operations, in Pulsar's ``OxiaMetadataStore`` layout (pulsar-metadata 4.0.x):

- key = the path; a put first makes every missing parent an empty record (``IfRecordDoesNotExist``:
  a parent made by someone else in between is fine), as Pulsar's ``createParents`` does.
- children = ``List(path + "/", path + "//")`` on every shard (children hash to any shard), merged.
- create-only (``expected_version`` -1) = ``expected_version_id`` -1; ``AlreadyExists`` otherwise.
- ``Stat.version`` = the record's ``modifications_count`` (0 when created, +1 per put): a
  departure from Pulsar, whose ``Stat.version`` is the ``version_id`` (a shard-wide counter of
  writes: docs/design.md, "Versions across the switch, and out of Oxia"). So a
  compare-and-set on ``n`` reads the record, checks its count is ``n`` and puts with
  ``expected_version_id`` = the ``version_id`` read, which fails if anyone wrote in between: two
  round trips, atomic all the same.
- ephemeral = a record of the store's session on its shard, with the store's client identity;
  ``created_by_self`` = that identity is ours and the record's session is the one the store holds
  on its shard now (stricter than Pulsar's rule, the identity alone, which reads a lost session's
  records as ours until the server expires them); ``Stat.owner`` = the session id
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

from metashift.stores.oxia.proto import client_pb2 as pb

from .. import paths
from ..errors import AlreadyExists, BadVersion, NotEmpty, NotFound
from ..ops import GetResult
from ..stat import Stat
from .connection import OxiaConnection
from .keys import Keys
from .records import Records, check_status

#: Largest value we accept (the server takes requests of up to 256 MiB; Pulsar's values are small,
#: ZooKeeper's limit is 1 MiB, etcd's 1.5 MiB: a copy from either always fits).
MAX_VALUE_SIZE = 4 * 1024 * 1024
#: Names a sequential put tries before giving up.
_SEQUENTIAL_ATTEMPTS = 20


class Operations:
    """The Oxia store's single operations (get, exists, children, put, delete), on its records."""

    def __init__(self, conn: OxiaConnection, keys: Keys, records: Records) -> None:
        self._conn = conn
        self._keys = keys
        self._records = records

    # ---- reads ----------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult:
        resp = await self._records.get(path)
        return None if resp is None else (bytes(resp.value), self._records.stat(path, resp.version))

    async def exists(self, path: str) -> bool:
        return await self._records.get(path, value=False) is not None

    async def get_children(self, path: str) -> list[str]:
        start, end = self._keys.children_range(path)
        prefix = self._keys.children_prefix(path)
        names = set()
        for key in await self._records.list(path, start, end):
            name = key[len(prefix):]
            if name and paths.SEPARATOR not in name:  # not the node "/" itself (a parent made at top level)
                names.add(name)
        return sorted(names)

    # ---- writes ---------------------------------------------------------------------------------

    async def put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        if expected_version is None or expected_version == -1 or sequential:
            await self.make_parents(path)
            if sequential:
                return await self._put_sequential(path, value, ephemeral)
            version = await self._records.put(path, value, expected_version, ephemeral)
            return self._records.stat(path, version)
        # a compare-and-set: the record exists (so do its parents), or nothing is written
        current = await self._records.get(path, value=False)
        if current is None or current.version.modifications_count != expected_version:
            raise BadVersion(path)
        version = await self._records.put(path, value, current.version.version_id, ephemeral)
        return self._records.stat(path, version)

    async def _put_sequential(self, path: str, value: bytes, ephemeral: bool) -> Stat:
        parent = paths.parent(path) or paths.SEPARATOR
        for _ in range(_SEQUENTIAL_ATTEMPTS):
            counter = await self._records.put(parent, b"", None, False)
            name = f"{path}{counter.modifications_count:010d}"
            try:
                return self._records.stat(name, await self._records.put(name, value, -1, ephemeral))
            except AlreadyExists:
                continue  # a name a copy brought over: the next number
        raise AlreadyExists(path, "every sequential name tried was taken")

    async def make_parents(self, path: str) -> None:
        """Make the missing ancestors of ``path`` empty records, outermost first (Pulsar makes
        them innermost first; the end is the same, and a failure half way never leaves a record
        whose parent is missing). One read when the parent is there."""
        parent = paths.parent(path)
        if parent is None or parent == paths.SEPARATOR or await self.exists(parent):
            return
        missing = [parent]
        for ancestor in reversed(paths.ancestors(parent)):
            if await self.exists(ancestor):
                break
            missing.append(ancestor)
        for ancestor in reversed(missing):
            try:
                await self._records.put(ancestor, b"", -1, False)
            except AlreadyExists:
                pass

    async def delete(self, path: str, expected_version: int | None) -> None:
        if await self.get_children(path):
            raise NotEmpty(path)
        key = self._keys.key(path)
        shard = self._conn.shard_for(key)
        if expected_version is None:
            resp = await self._records.batcher.delete(path, shard, pb.DeleteRequest(key=key))
            if resp.status == pb.KEY_NOT_FOUND:
                raise NotFound(path)
            check_status(resp.status, path)
            return
        current = await self._records.get(path, value=False)
        if current is None:
            raise NotFound(path)
        if current.version.modifications_count != expected_version:
            raise BadVersion(path)
        request = pb.DeleteRequest(key=key, expected_version_id=current.version.version_id)
        resp = await self._records.batcher.delete(path, shard, request)
        if resp.status in (pb.UNEXPECTED_VERSION_ID, pb.KEY_NOT_FOUND):
            raise NotFound(path) if await self._records.get(path, value=False) is None else BadVersion(path)
        check_status(resp.status, path)
