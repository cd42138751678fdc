"""The ephemerals in the answers ZooKeeper gives to requests passed through (``passthrough``).

ZooKeeper creates every ephemeral on the agent's own store session, so its answers name that
session as the owner. The front records each one under the ZooKeeper session that asked for it
(``SessionRegistry``: it dies with that session and is re-created in the target at PREPARATION),
and shows that session's id as ``ephemeralOwner``, as Curator and Pulsar compare it with their own.
"""

from __future__ import annotations

import asyncio

from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.stores import Stat
from metashift.stores.errors import MetadataStoreError
from metashift.stores.zookeeper import ZooKeeperStore, wire
from metashift.stores.zookeeper.wire import Op, Reader
from metashift.stores.zookeeper.wire.jute import INT, MULTI_HEADER, STAT


class EphemeralOwners:
    """Records the ephemerals of a ZooKeeper store's answers, and names their owners in them."""

    def __init__(self, store: ZooKeeperStore, registry: SessionRegistry, sessions: ZkSessions) -> None:
        self._store = store
        self.registry = registry
        self.sessions = sessions

    def record_set(self, path: str, value: bytes, body: bytes) -> None:
        """A new value of an ephemeral this agent tracks (the answer's Stat says ephemeral)."""
        if self.registry.owner_of(path) is None:
            return
        stat = wire.stat_at_end(body)
        owned = stat.ephemeral_owner != 0
        self.registry.record_put(None, value, owned, Stat(path, stat.version, 0, 0, owned, owned))

    def record_multi(self, session: ZkSession, ended: bool, ops: list[tuple[int, object]], body: bytes) -> bytes:
        """Record the ephemerals a multi created, changed and deleted; its answer with the owners
        of the session's ephemerals."""
        r = Reader(body)
        out = bytearray()
        for _op, sub in ops:
            start = r.pos
            kind, _done, _err = r.take(MULTI_HEADER)
            out += body[start : r.pos]
            if kind in (Op.CREATE, Op.CREATE2):
                created = r.string()
                out += INT.pack(len(created.encode())) + created.encode()
                ephemeral = wire.CreateMode.ephemeral(sub.flags)  # type: ignore[attr-defined]
                if ephemeral:
                    self.registry.record_put(session.client, sub.data, True,  # type: ignore[attr-defined]
                                             Stat(created, 0, 0, 0, True, True))
                    if ended:
                        self.drop(created)
                if kind == Op.CREATE2:
                    s = r.pos
                    r.take(STAT)
                    stat = body[s : r.pos]
                    out += with_owner(stat, session.id) if ephemeral else stat
            elif kind == Op.SET_DATA:
                s = r.pos
                r.take(STAT)
                stat = body[s : r.pos]
                path = sub.path  # type: ignore[attr-defined]
                self.record_set(path, sub.data, stat)  # type: ignore[attr-defined]
                out += self.own(stat, path)
            elif kind == Op.DELETE:
                self.registry.record_delete(sub.path)  # type: ignore[attr-defined]
            elif kind == Op.ERROR:
                out += body[r.pos : r.pos + 4]
                r.int()
        out += body[r.pos :]
        return bytes(out)

    def drop(self, path: str) -> None:
        """An ephemeral created for a session that ended meanwhile: deleted now."""
        self.registry.record_delete(path)
        store = self._store

        async def delete() -> None:
            try:
                await store.delete(path, expected_version=0)
            except MetadataStoreError:
                pass

        asyncio.get_running_loop().create_task(delete())

    def own(self, body: bytes, path: str) -> bytes:
        """``body`` (ending with a Stat) with the owner of an ephemeral of the store's session that
        one of the front's sessions owns: that session's id."""
        owner = wire.owner_at_end(body)
        if owner == 0 or owner != self._store.session_id:
            return body
        sid = self.sessions.owner_id(self.registry.owner_of(path))
        return with_owner(body, sid) if sid else body


def with_owner(body: bytes, owner: int) -> bytes:
    """``body`` (ending with a Stat) with ``owner`` as its ephemeralOwner."""
    return wire.with_owner_at_end(body, owner)
