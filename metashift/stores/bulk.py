"""The bulk interface of the copy, its verification and sample data: walk a tree, restore nodes
with their exact versions, carry sequence counters over, compact a store's history.

Apart from Pulsar's ``MetadataStore`` API (``api.py``): brokers and the agent's clients never see
it. Each backend implements it with its own fast paths (``zookeeper/tree_reads.py``, ``etcd/tree_reads.py``);
the checks of the arguments are here, once.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass

from . import paths
from .api import MetadataStore
from .errors import MetadataStoreError
from .ops import GetOp, Op, PutOp

#: Name of the throw-away children that ``advance_sequence_counter`` creates and deletes again.
COUNTER_PROBE = "metashift-counter-probe"


@dataclass(frozen=True)
class NodeInfo:
    """One node as a listing (``BulkStore.walk``) sees it."""

    path: str
    version: int
    size: int
    """Length of the value in bytes."""
    ephemeral: bool = False
    owner: int = 0
    """The store session an ephemeral lives on (``Stat.owner``); 0 for a persistent node."""
    position: int = 0
    """Where in the store's history the node was last written (``BulkStore.position_of``)."""


@dataclass(frozen=True)
class NodeRead:
    """One node as ``BulkStore.read_trees`` and ``read_many`` read it: value included."""

    path: str
    value: bytes
    version: int
    ephemeral: bool = False


@dataclass(frozen=True)
class Restore:
    """Bring ``path`` to exactly ``value`` at ``version`` (``BulkStore.restore_many``)."""

    path: str
    value: bytes
    version: int
    current: int = -1
    """The version the node has in this store now, as read just before (-1: it does not exist)."""


@dataclass(frozen=True)
class SessionLife:
    """What a store tells of one session (``BulkStore.session_lives``): whether it still holds
    it, how long it still has unless it is renewed, and whether a client renews it. ``None``
    wherever the store does not tell; ``unknown`` says plainly what it cannot."""

    owner: int
    """The session as ``NodeInfo.owner`` names it."""
    name: str
    """How the store calls it: ``lease 0x1a2b`` (etcd), ``session 0x1a2b`` (ZooKeeper), ``session
    0x1a2b (2 on shard 0)`` (Oxia)."""
    alive: bool | None = None
    """The store still holds it (False: it lapsed, its ephemerals are gone or going)."""
    expires_in: float | None = None
    """Seconds until the store expires it unless it is renewed meanwhile."""
    timeout: float | None = None
    """Its time to live as granted or negotiated, in seconds."""
    expires_within: float | None = None
    """A bound on ``expires_in`` when that is not told: it lapses within this many seconds of its
    client's last contact (ZooKeeper: the server's ``maxSessionTimeout``; Oxia: its timeout)."""
    renewed: bool | None = None
    """True: a client keeps it alive now (ZooKeeper: a connection carries it); False: nobody can
    until a client resumes it (ZooKeeper: no connection to any server asked); ``None``: the store
    does not tell (etcd, Oxia: only watching it over time does)."""
    within: str = ""
    """What ``expires_within`` is, in words: ``its timeout``, ``the server's maxSessionTimeout``."""
    unknown: str = ""
    """What the store cannot tell of it, in words (empty when it tells everything above)."""


class BulkStore(ABC):
    """The bulk operations of a store, for the copy, its verification and sample data."""

    #: True when a node can only be created under an existing parent (ZooKeeper): a bulk writer
    #: must then restore parents before their children. etcd keeps no parents.
    needs_parents: bool = False
    #: True when ``advance_sequence_counter`` takes one write whatever the distance (Oxia's
    #: modifications-count override); ZooKeeper and etcd take one (or two) per step.
    sequence_counter_in_one_write: bool = False

    async def walk(
        self, root: str = paths.SEPARATOR, *, prune: Collection[str] = ()
    ) -> AsyncIterator[list[NodeInfo]]:
        """Every node below ``root`` (``root`` itself not included), in pages, breadth first: a
        node's parent always comes in an earlier page or earlier in the same page. Subtrees whose
        root is in ``prune`` are neither listed nor descended into. A path that only exists as the
        parent of other keys (etcd) is not listed, but its children are. Nodes that vanish while
        the walk runs are left out."""
        paths.validate(root)
        async for page in self._walk(root, set(prune)):
            yield page

    async def read_trees(
        self, roots: Sequence[str], *, prune: Collection[str] = ()
    ) -> AsyncIterator[list[NodeRead]]:
        """Every node of the subtrees rooted at ``roots`` (the roots included, when they exist),
        values read, in pages of non-decreasing depth: a node's parent, when listed, always
        comes in an earlier page or earlier in the same page. Roots must not lie inside one
        another. Subtrees whose root is in ``prune`` are neither listed nor descended into.
        Nodes that vanish while it runs are left out. What the copy's executors list and read."""
        for root in roots:
            paths.validate(root)
        async for page in self._read_trees(sorted(roots), set(prune)):
            yield page

    async def read_many(self, items: Sequence[str]) -> list[NodeRead | None]:
        """The nodes at ``items`` (``None`` where missing), read together."""
        out: list[NodeRead | None] = []
        for path, got in zip(items, await self.batch([GetOp(p) for p in items]), strict=True):  # type: ignore[attr-defined]
            if isinstance(got, MetadataStoreError):
                raise got
            if got is None:
                out.append(None)
            else:
                value, stat = got
                out.append(NodeRead(path, value, stat.version, stat.ephemeral))
        return out

    async def restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        """Bring each node to exactly its ``value`` at its ``version``: create it when
        ``current`` is -1, then write until the store's own version count reaches ``version`` (no
        store lets a version be set; they count writes). The intermediate writes carry empty
        values, the last one the value. Every write is conditional on the version the previous
        one left, so a stale ``current`` gives ``BadVersion`` rather than a wrong version.
        Returns, per item, the number of writes it took, or the error that stopped it (the node
        is then left at some version between ``current`` and ``version``, and a new call with
        the version read again resumes). Paths must be distinct; parents are the caller's
        business (create them first)."""
        for item in items:
            self._check_value(item.path, item.value)
            if not 0 <= item.version or not -1 <= item.current <= item.version:
                raise ValueError(f"cannot restore {item.path} from version {item.current} to {item.version}")
        return await self._restore_many(items)

    async def restore(self, path: str, value: bytes, version: int, current: int = -1) -> int:
        """``restore_many`` for one node; raises the error instead of returning it."""
        (result,) = await self.restore_many([Restore(path, bytes(value), version, current)])
        if isinstance(result, MetadataStoreError):
            raise result
        return result

    @abstractmethod
    async def position_of(self, path: str) -> int | None:
        """Where in the store's history ``path`` was last written (created or changed), ``None``
        when it does not exist: ZooKeeper's mzxid, etcd's mod_revision, Oxia's modification
        time in ms. Positions of one store compare: a node written after another has a higher
        one (on Oxia to the server clock's millisecond). ``NodeInfo.position`` of a walk is
        the same number: a walk finds what was written after a position was taken."""

    @abstractmethod
    async def children_version(self, path: str) -> int | None:
        """The counter behind sequential children of ``path`` (ZooKeeper: the parent's cversion;
        etcd: the parent key's version), ``None`` when ``path`` does not exist."""

    async def sequence_counter(self, parent: str) -> int:
        """The suffix the next sequential child of ``parent`` will get; every suffix this store
        handed out under ``parent`` so far is smaller. 0 when ``parent`` does not exist."""
        return await self.children_version(paths.validate(parent)) or 0

    @abstractmethod
    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """Make the next sequential suffix under ``parent`` at least ``at_least`` (the parent's
        value is kept). May overshoot a little. Returns the number of writes it took."""

    async def advance_sequence_counters(self, wanted: dict[str, int]) -> int:
        """``advance_sequence_counter`` of each ``parent: at_least`` of ``wanted``, together
        (etcd: their steps share requests). Returns the number of writes it took."""
        counts = await asyncio.gather(*(self.advance_sequence_counter(p, n) for p, n in sorted(wanted.items())))
        return sum(counts)

    async def compact_history(self, *, wait: bool = True) -> None:
        """Drop the history of old values the store keeps after a bulk write (etcd's MVCC
        revisions, which count against its quota). ``wait=False``: return once the store has
        taken the request, while it frees the space in the background. Nothing to do for most
        stores."""
        return None

    async def history_bytes(self) -> int | None:
        """The bytes the store's data and its history of old values take now (etcd: its backend
        in use, what counts against its quota), so that a bulk writer can compact its history
        when its writes have made it grow; ``None`` for stores without history."""
        return None

    async def session_lives(self, sessions: Mapping[int, Sequence[str]]) -> dict[int, SessionLife]:
        """What the store tells of each session of ``sessions`` (``NodeInfo.owner`` -> the paths
        of some of its ephemerals, which a store whose owner is not the session itself reads: Oxia)
        and its time left: etcd's lease time-to-live, what ZooKeeper's four-letter commands show,
        Oxia's session record. Nothing is renewed, changed or written. Here: nothing is told."""
        return {owner: SessionLife(owner, f"session 0x{owner:x}", unknown="this store does not tell")
                for owner in sessions}

    # ---- what each backend implements -----------------------------------------------------------

    @abstractmethod
    def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        """``walk`` of a checked ``root``."""

    @abstractmethod
    def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        """``read_trees`` of checked, sorted ``roots``."""

    @abstractmethod
    async def _restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        """``restore_many`` of checked items."""

    @abstractmethod
    def _check_value(self, path: str, value: bytes) -> None:
        """Raise what ``put`` would raise for ``value`` at ``path``."""


async def restore_by_puts(store: MetadataStore, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
    """``restore_many`` through the public API: rounds of conditional puts, one per node and
    round, in batches. Slow but exact: each failing node gets the error its own put got."""
    results: list[int | MetadataStoreError] = [0] * len(items)
    current = [item.current for item in items]
    pending = [i for i, item in enumerate(items) if item.current < item.version]
    while pending:
        ops: list[Op] = []
        for i in pending:
            item = items[i]
            value = item.value if current[i] + 1 == item.version else b""
            ops.append(PutOp(item.path, value, current[i]))
        answers = await store.batch(ops)
        still: list[int] = []
        for i, answer in zip(pending, answers, strict=True):
            if isinstance(answer, MetadataStoreError):
                results[i] = answer
                continue
            current[i] += 1
            count = results[i]
            assert isinstance(count, int)
            results[i] = count + 1
            if current[i] < items[i].version:
                still.append(i)
        pending = still
    return results
