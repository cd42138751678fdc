"""etcd keys and node paths: key = the node path, UTF-8, after the URL's prefix if any
(``etcd://h:2379/some/prefix``: test isolation; Pulsar has none)."""

from __future__ import annotations

from .. import paths


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    b = bytearray(prefix)
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return b"\x00"  # the whole key space


class Keys:
    """The mapping between a store's paths and its etcd keys."""

    def __init__(self, root: str) -> None:
        self.namespace = paths.Namespace(root)

    def key(self, path: str) -> bytes:
        """The etcd key of ``path``."""
        return self.namespace.full(path).encode()

    def path_of(self, key: bytes) -> str | None:
        """The path of ``key``; ``None`` for a key outside the prefix or not UTF-8."""
        try:
            text = key.decode()
        except UnicodeDecodeError:
            return None
        return self.namespace.relative(text)

    def children_prefix(self, path: str) -> bytes:
        """What the keys of every node below ``path`` start with."""
        return self.namespace.children_prefix(path).encode()
