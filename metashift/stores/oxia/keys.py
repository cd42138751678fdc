"""Oxia keys and node paths, in Pulsar's ``OxiaMetadataStore`` layout: key = the node path (after
the URL's prefix, if any: test isolation; Pulsar has none), routed to a shard by Oxia's hash.

Oxia's hash (``common/hash``, ``Xxh332``): the low 32 bits of the 64-bit XXH3 of the key's UTF-8
bytes, seed 0; a shard holds the hashes ``[min_hash_inclusive, max_hash_inclusive]`` of its range.

Oxia's key order (the "hierarchical" encoding of a namespace, ``common/compare``): a key sorts by
its number of ``/`` first (a trailing ``//`` counting as one), then byte by byte with ``/`` above
every other byte. So the keys of one depth below a prefix form one range, and the children of a
node are ``[path + "/", path + "//")``, Pulsar's listing. ``level_range`` gives the range of the
nodes ``k`` levels below a node (the walk scans the tree a level at a time).
"""

from __future__ import annotations

import xxhash

from .. import paths

#: A key deeper than any a store holds (``/`` x N has N-1 levels: the trailing ``//`` counts once):
#: the highest key of a shard at or below it (``FLOOR``) is its deepest.
DEEPEST_KEY = "/" * 8192


def key_hash(key: str) -> int:
    """Oxia's shard-routing hash of ``key``."""
    return xxhash.xxh3_64_intdigest(key.encode()) & 0xFFFFFFFF


def depth(key: str) -> int:
    """The level of ``key`` in Oxia's key order: its number of ``/``, a trailing ``//`` counting once."""
    count = key.count(paths.SEPARATOR)
    return count - 1 if key.endswith("//") and len(key) >= 2 else count


def sort_key(key: str) -> tuple[int, bytes]:
    """Where ``key`` sorts in Oxia's hierarchical order (to merge the answers of several shards)."""
    return depth(key), key.encode().replace(b"/", b"\xff")


def level_range(prefix: str, below: int) -> tuple[str, str]:
    """The key range of the nodes ``below + 1`` levels under the node whose children's keys start
    with ``prefix`` (which ends with ``/``): ``below`` 0 is its children. The start adds levels of
    NUL names, below every real name; the end adds ``/``, above every real byte."""
    return prefix + "\x00/" * below, prefix + "/" * (below + 1)


class Keys:
    """The mapping between a store's paths and its Oxia keys."""

    def __init__(self, root: str) -> None:
        self.namespace = paths.Namespace(root)

    def key(self, path: str) -> str:
        """The Oxia key of ``path``."""
        return self.namespace.full(path)

    def path_of(self, key: str) -> str | None:
        """The path of ``key``; ``None`` for a key outside the prefix."""
        return self.namespace.relative(key)

    def children_prefix(self, path: str) -> str:
        """What the keys of every node below ``path`` start with."""
        return self.namespace.children_prefix(path)

    def children_range(self, path: str) -> tuple[str, str]:
        """Pulsar's listing of the children of ``path``: ``[path/, path//)``."""
        return level_range(self.children_prefix(path), 0)
