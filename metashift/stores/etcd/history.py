"""``History``: where a key was last written in etcd's history, and that history's size and
compaction.

etcd's history is one for the whole server, not a prefix's: a compaction drops every key's old
revisions. etcd 3.4 lets any authenticated user compact and read the member's status; a server
that keeps them to its root role (``auth: permission denied``) leaves the history of the
migration's writes to its own compaction (``--auto-compaction-retention``): the store says so
once and goes on without compacting.
"""

from __future__ import annotations

import logging

from aetcd import rpc

from .. import paths
from ..errors import AuthFailed, MetadataStoreError
from .connection import EtcdConnection
from .keys import Keys

log = logging.getLogger(__name__)

#: (hosts, user) for which a refused compaction was said already: said once in a process.
_refusals_said: set[tuple[str, str | None]] = set()


class History:
    """etcd's history of revisions: a key's position in it, its bytes, its compaction."""

    def __init__(self, conn: EtcdConnection, keys: Keys) -> None:
        self._conn = conn
        self._keys = keys

    async def position_of(self, path: str) -> int | None:
        """The key's mod_revision: the revision that last wrote it."""
        resp = await self._conn.range(path, rpc.RangeRequest(key=self._keys.key(paths.validate(path))))
        return int(resp.kvs[0].mod_revision) if resp.kvs else None

    async def history_bytes(self) -> int | None:
        """The backend's bytes in use, as the member we talk to reports it (etcd 3.4+; the whole
        backend file on older servers). Not the revision: a revision is one txn, of up to 128
        writes, so revisions say little about the history a bulk write leaves."""
        conn = self._conn
        request = rpc.StatusRequest()
        try:
            resp = await conn.call(None, lambda md: conn.maintenance.Status(request, timeout=conn.timeout, metadata=md))
        except AuthFailed as e:
            self._refused("its status", e)
            return None  # as a store without history: nobody compacts on its growth
        return int(resp.dbSizeInUse or resp.dbSize)

    async def compact_history(self, *, wait: bool = True) -> None:
        """Compact etcd's history up to now (it is global: every key's old revisions go).
        ``wait``: until the space is freed (etcd's physical compaction, which takes longer the
        more the server holds, not the more was written); else etcd frees it in the background,
        in small batches, and its pages are reused by the writes that follow."""
        conn = self._conn
        resp = await conn.range(None, rpc.RangeRequest(key=self._keys.key(paths.SEPARATOR), count_only=True))
        request = rpc.CompactionRequest(revision=resp.header.revision, physical=wait)
        timeout = max(conn.timeout, 120.0)
        try:
            await conn.call(None, lambda md: conn.kv.Compact(request, timeout=timeout, metadata=md))
        except AuthFailed as e:
            self._refused("compactions", e)
        except MetadataStoreError as e:
            if "compacted" not in str(e):  # already compacted at or past that revision: fine
                raise

    def _refused(self, what: str, error: AuthFailed) -> None:
        """etcd keeps ``what`` to its root role: said once (module doc), not raised."""
        url = self._conn.url
        said = (url.host_string(), url.username)
        if said in _refusals_said:
            return
        _refusals_said.add(said)
        log.warning(
            "%s: etcd refuses %s to user %r (%s); the history of this migration's writes is not compacted by"
            " metashift: etcd's own compaction (--auto-compaction-retention) or its operator must compact it",
            url, what, url.username, error,
        )
