"""ZooKeeper's writes with their tree rules, several in one round where the store can.

A ZooKeeper-protocol server in front of a store without a real tree (etcd) must check what
ZooKeeper checks itself — a create's parent exists and is not ephemeral, a delete's node has no
children — and a session's writes must apply in the order they were sent. Checked one by one
that is a read and a write per request, one request at a time. ``MetadataStore.tree_writes``
sends a run of them with their conditions in one request instead (etcd: one txn of compares and
writes), all or nothing per round: the result is how many of the run, from its start, applied.
"""

from __future__ import annotations

from dataclasses import dataclass

from .stat import Stat


@dataclass(frozen=True)
class CreateNode:
    """create: ``path`` absent, its parent present and not ephemeral (the root needs no check)."""

    path: str
    value: bytes
    ephemeral: bool = False


@dataclass(frozen=True)
class SetNode:
    """setData: ``path`` present (at ``expected_version`` unless None); keeps it ephemeral if it was."""

    path: str
    value: bytes
    expected_version: int | None = None


@dataclass(frozen=True)
class DeleteNode:
    """delete: ``path`` present (at ``expected_version`` unless None) and without children."""

    path: str
    expected_version: int | None = None


TreeWrite = CreateNode | SetNode | DeleteNode
#: A create's new Stat; a setData's new Stat and the node's number of children; a delete's None.
TreeResult = Stat | tuple[Stat, int] | None


def parent_of(path: str) -> str:
    """The parent whose existence a create of ``path`` needs (``/`` at the top)."""
    return path.rsplit("/", 1)[0] or "/"


class RunCutter:
    """Where a run of tree writes must be cut so that one round can carry it: a write that reads
    or writes what an earlier one of the round writes (a create under a node created or deleted
    in the round, a delete of a node the round creates children under, two writes of one path)
    starts a new round, since a round's conditions are all checked before any of its writes."""

    __slots__ = ("_parents", "_written")

    def __init__(self) -> None:
        self._written: set[str] = set()
        self._parents: set[str] = set()

    def fits(self, op: TreeWrite) -> bool:
        """Whether ``op`` can join the round; if so it is counted in."""
        path = op.path
        if path in self._written:
            return False
        if isinstance(op, CreateNode):
            parent = parent_of(path)
            if parent in self._written:
                return False
            self._parents.add(parent)
        elif isinstance(op, DeleteNode):
            below = path + "/"
            if path in self._parents or any(w.startswith(below) for w in self._written):
                return False
        self._written.add(path)
        return True
