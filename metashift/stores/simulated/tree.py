"""The simulated server's data: one tree of nodes, each write applied whole at once and numbered
in one history, with the notifications it makes. Synchronous on purpose: a write is atomic
because nothing else runs while it is applied, and the simulator decides when that is.

Pulsar's rules where the stores differ, the way its ZooKeeper store applies them: a put makes
every missing parent (an empty persistent node); a delete refuses a node with children; a
sequential child is named from its parent's count of child creations (ten digits); an ephemeral
lives on a session and goes with it; a child under an ephemeral is accepted (as etcd and Oxia do).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import paths
from ..errors import AlreadyExists, BadVersion, NotEmpty, NotFound
from ..notifications import Notification, NotificationType
from ..stat import Stat


@dataclass
class Node:
    """One node: its value, its version (0 when made, +1 per write), who holds it (a session id
    for an ephemeral, 0 for a persistent node), its children's names and its count of child
    creations (the sequential suffix)."""

    value: bytes
    version: int = 0
    owner: int = 0
    position: int = 0
    """The history's number of its last write (ZooKeeper's mzxid)."""
    children: set[str] = field(default_factory=set)
    child_creations: int = 0


class Tree:
    """Every node of one simulated server, and the history's counter."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {paths.SEPARATOR: Node(b"")}
        self.position = 0

    # ---- reads ----------------------------------------------------------------------------------

    def get(self, path: str) -> Node | None:
        return self.nodes.get(path)

    def stat(self, path: str, node: Node, session: int) -> Stat:
        """The ``Stat`` of ``node`` as the session ``session`` sees it (0: none)."""
        return Stat(path, node.version, ephemeral=node.owner != 0,
                    created_by_self=node.owner != 0 and node.owner == session, owner=node.owner)

    def children(self, path: str) -> list[str]:
        node = self.nodes.get(path)
        return sorted(node.children) if node is not None else []

    # ---- writes ---------------------------------------------------------------------------------

    def put(self, path: str, value: bytes, expected_version: int | None, owner: int,
            sequential: bool) -> tuple[str, Node, list[Notification]]:  # fmt: skip
        """Apply one put; (the real path, its node, the notifications it makes)."""
        out: list[Notification] = []
        if sequential:
            parent = self._parent_made(_parent(path + "0"), out)
            path = f"{path}{self.nodes[parent].child_creations:010d}"
        node = self.nodes.get(path)
        if node is None:
            if expected_version is not None and expected_version >= 0:
                raise BadVersion(path)
            parent = self._parent_made(_parent(path), out)
            node = self._make(path, parent, value, owner, out)
            return path, node, out
        if expected_version == -1:
            raise AlreadyExists(path)
        if expected_version is not None and node.version != expected_version:
            raise BadVersion(path)
        node.value, node.version = value, node.version + 1
        node.owner = owner
        node.position = self._next()
        out.append(Notification(NotificationType.MODIFIED, path))
        return path, node, out

    def delete(self, path: str, expected_version: int | None) -> list[Notification]:
        node = self.nodes.get(path)
        if node is None:
            raise NotFound(path)
        if expected_version is not None and node.version != expected_version:
            raise BadVersion(path)
        if node.children:
            raise NotEmpty(path)
        return self._remove(path)

    def delete_owned_by(self, owner: int) -> list[Notification]:
        """Delete every ephemeral of the session ``owner`` (it ended), deepest first."""
        out: list[Notification] = []
        for path in sorted((p for p, n in self.nodes.items() if n.owner == owner), key=len, reverse=True):
            if path in self.nodes and not self.nodes[path].children:
                out += self._remove(path)
        return out

    def advance_child_creations(self, path: str, at_least: int) -> bool:
        """Make ``path``'s next sequential suffix at least ``at_least``; True when it moved."""
        node = self.nodes.get(path)
        if node is None:
            raise NotFound(path)
        if node.child_creations >= at_least:
            return False
        node.child_creations = at_least
        self._next()
        return True

    # ---- inside ---------------------------------------------------------------------------------

    def _next(self) -> int:
        self.position += 1
        return self.position

    def _parent_made(self, parent: str, out: list[Notification]) -> str:
        """``parent``, made (with its own missing parents) when it is missing."""
        if parent not in self.nodes:
            grand = self._parent_made(_parent(parent), out)
            self._make(parent, grand, b"", 0, out)
        return parent

    def _make(self, path: str, parent: str, value: bytes, owner: int, out: list[Notification]) -> Node:
        node = Node(value, owner=owner, position=self._next())
        self.nodes[path] = node
        above = self.nodes[parent]
        above.children.add(_name(path))
        above.child_creations += 1
        out.append(Notification(NotificationType.CREATED, path))
        out.append(Notification(NotificationType.CHILDREN_CHANGED, parent))
        return node

    def _remove(self, path: str) -> list[Notification]:
        del self.nodes[path]
        parent = _parent(path)
        self.nodes[parent].children.discard(_name(path))
        self._next()
        return [Notification(NotificationType.DELETED, path), Notification(NotificationType.CHILDREN_CHANGED, parent)]


def _parent(path: str) -> str:
    above = paths.parent(path)
    assert above is not None, "the root has no parent"
    return above


def _name(path: str) -> str:
    return path.rsplit(paths.SEPARATOR, 1)[1]
