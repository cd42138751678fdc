"""``TreeReads``: the copy's reads of whole subtrees on etcd, by range scans (etcd has no tree:
a subtree is the range of the keys under a prefix, and key order puts parents first)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aetcd import rpc

from .. import paths
from ..bulk import NodeInfo, NodeRead
from .connection import EtcdConnection
from .keys import Keys, prefix_end

#: Keys per page of ``walk`` (values included). etcd 3.4 walks the whole rest of the range for every
#: limited page, so few large pages beat many small ones (200k keys: 1.3 s at 10k, 3.4 s at 1k).
WALK_PAGE_KEYS = 10_000


def _below(prune: set[str]) -> tuple[str, ...]:
    """The prefixes of the paths below the roots of ``prune`` (for one ``str.startswith``)."""
    return tuple(r if r == paths.SEPARATOR else r + paths.SEPARATOR for r in prune)


def _pruned(path: str, prune: set[str], below: tuple[str, ...]) -> bool:
    return path in prune or path.startswith(below)


def _at_depth(path: str, depth: int) -> str:
    """The ancestor of ``path`` with ``depth`` separators (``path`` itself when not deeper)."""
    cut = -1
    for _ in range(depth + 1):
        cut = path.find(paths.SEPARATOR, cut + 1)
        if cut < 0:
            return path
    return path[:cut]


class TreeReads:
    """Lists (``walk``) and reads (``read_trees``) subtrees by paged range scans, each at one
    pinned revision."""

    def __init__(self, conn: EtcdConnection, keys: Keys) -> None:
        self._conn = conn
        self._keys = keys

    async def walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        """One range scan over the keys below ``root``, paged, at one pinned revision; key
        order puts every parent before its children."""
        prefix = self._keys.children_prefix(root)
        end = prefix_end(prefix)
        pruned = _below(prune)
        start = prefix
        revision = 0
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, limit=WALK_PAGE_KEYS, revision=revision)
            resp = await self._conn.range(root, req)
            if not revision:
                revision = resp.header.revision
            page = []
            for kv in resp.kvs:
                path = self._keys.path_of(kv.key)
                if path is None or path == paths.SEPARATOR or (pruned and _pruned(path, prune, pruned)):
                    continue
                page.append(NodeInfo(path, kv.version - 1, len(kv.value), kv.lease != 0, kv.lease, kv.mod_revision))
            if page:
                yield page
            if not resp.more or not resp.kvs:
                return
            start = resp.kvs[-1].key + b"\x00"

    async def read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        """One range scan from the first root's key to the end of the last subtree, at
        one pinned revision, keeping the keys that are a root or under one (sorted sibling
        roots leave little else in between); then in pages by depth."""
        if not roots:
            return
        wanted = set(roots)
        pruned = _below(prune)
        # a path is kept when its ancestor at a root's depth (or itself) is a root
        depths = sorted({r.count(paths.SEPARATOR) for r in roots})
        everything = paths.SEPARATOR in wanted  # "/" has no depth of its own: it holds every path
        start = self._keys.key(roots[0])
        # not the last root's end: "/a-x/" sorts before "/a/", so "/a"'s subtree may end later
        end = max(prefix_end(self._keys.children_prefix(r)) for r in roots)
        revision = 0
        found: list[NodeRead] = []
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, limit=WALK_PAGE_KEYS, revision=revision)
            resp = await self._conn.range(roots[0], req)
            if not revision:
                revision = resp.header.revision
            for kv in resp.kvs:
                path = self._keys.path_of(kv.key)
                if path is None or path == paths.SEPARATOR or (pruned and _pruned(path, prune, pruned)):
                    continue
                if everything or path in wanted or any(_at_depth(path, d) in wanted for d in depths):
                    found.append(NodeRead(path, kv.value, kv.version - 1, kv.lease != 0))
            if not resp.more or not resp.kvs:
                break
            start = resp.kvs[-1].key + b"\x00"
        found.sort(key=lambda n: (n.path.count(paths.SEPARATOR), n.path))
        for i in range(0, len(found), WALK_PAGE_KEYS):
            yield found[i : i + WALK_PAGE_KEYS]
