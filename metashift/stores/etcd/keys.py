"""etcd keys and node paths: key = the node path, UTF-8, after the URL's prefix if any
(``etcd://h:2379/some/prefix``: test isolation; Pulsar has none).

With a prefix ``/p``, the store reads and writes the key ``/p`` (its root node, the counter of
its top-level sequential nodes) and the keys below ``/p/``; never another key (``/p2``, ``/p-x``):
a role that grants exactly these two (``etcdctl role grant-permission R readwrite /p`` and
``... --prefix=true R readwrite /p/``) carries every operation."""

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

    @property
    def root(self) -> str:
        """The URL's prefix (``/`` when there is none)."""
        return self.namespace.root

    def grants(self) -> str:
        """What a role must grant to carry this store (module doc), said for an error message."""
        if self.root == paths.SEPARATOR:
            return "the prefix /"
        return f"the key {self.root} and the prefix {self.root}/"

    def watch_ranges(self, path: str) -> list[tuple[bytes, bytes]]:
        """The (key, range_end) ranges a watch of ``path``'s subtree covers (``range_end`` empty:
        the key alone): its key and every key below it. One range from the key to the end of its
        children's prefix, except at the root of a prefix ``/p``, where that range [``/p``,
        ``/p0``) would also cover keys outside the prefix (``/p-x``), which a role granting only
        the prefix refuses: there, the root key and the prefix ``/p/`` apart."""
        key = self.key(path)
        below = self.children_prefix(path)
        if path == paths.SEPARATOR and self.root != paths.SEPARATOR:
            return [(key, b""), (below, prefix_end(below))]
        return [(key, prefix_end(below))]

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
