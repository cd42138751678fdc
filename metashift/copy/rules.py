"""The rules the copy and its verification share: what is copied, which nodes are sequence
counters (and how each is carried: ``counters.py``), and how a target node compares with its
source node.

Both jobs call ``judge`` on the same inputs, so a node the copy leaves alone is a node the
verification accepts, and the other way round.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from metashift.stores import paths, reserved


def default_excluded() -> tuple[str, ...]:
    """Subtrees never copied: ZooKeeper's own, metashift's own (the migration's nodes, the
    sequence floors: ``reserved``), and PIP-454's (``/pulsar/migration-coordinator``: its only
    persistent node is a flag that Pulsar 4.2+ brokers would act on, or what an older metashift
    kept there; the participants Pulsar registers there are ephemerals, carried as every client's
    ephemerals are)."""
    return ("/zookeeper", reserved.own_root(), reserved.LEGACY_ROOT)

#: Plain sequential parents whose suffixes must keep growing, carried exactly (Pulsar's
#: producer-name counter). ``*`` matches one path segment.
DEFAULT_COUNTERS = ("/counters/*",)
#: Roots of BookKeeper's ledger-id generators (``R/idgen``, ``R/idgen-long/HOB-*``), carried by a
#: jump (``ledger_ids.py``). BookKeeper's ``zkLedgersRootPath``, ``/ledgers`` by default.
DEFAULT_LEDGERS_ROOTS = ("/ledgers",)


@dataclass(frozen=True)
class Rules:
    """What the copy and the verification cover. Plain data: it travels to Spark executors."""

    excluded: tuple[str, ...] = field(default_factory=default_excluded)
    counters: tuple[str, ...] = DEFAULT_COUNTERS
    """Patterns of plain sequential parents (carried exactly)."""
    ledgers_roots: tuple[str, ...] = DEFAULT_LEDGERS_ROOTS
    """Roots of BookKeeper's ledger-id generators (carried by a jump where the layout allows)."""
    _excluded_below: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _counter_heads: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _ledger_nodes: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _hob_heads: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for root in self.excluded:
            paths.validate(root)
        for pattern in self.counters:
            paths.validate(pattern)
        for root in self.ledgers_roots:
            paths.validate(root)
        # checked for every node, several times: a str.startswith of a tuple rejects most paths
        # at once (derived from the fields)
        below = tuple(r if r == paths.SEPARATOR else r + paths.SEPARATOR for r in self.excluded)
        object.__setattr__(self, "_excluded_below", below)
        object.__setattr__(self, "_counter_heads", tuple(_literal_head(p) for p in self.counters))
        nodes = {}
        for root in self.ledgers_roots:
            nodes[paths.join(root, "idgen")] = root
            nodes[paths.join(root, "idgen-long")] = root
        object.__setattr__(self, "_ledger_nodes", nodes)
        object.__setattr__(self, "_hob_heads", tuple(paths.join(r, "idgen-long") + "/" for r in self.ledgers_roots))

    def is_excluded(self, path: str) -> bool:
        return path in self.excluded or path.startswith(self._excluded_below)

    def is_excluded_ancestor(self, path: str) -> bool:
        """True for a proper ancestor of an excluded root (a parent a ZooKeeper store needs)."""
        below = path if path == paths.SEPARATOR else path + paths.SEPARATOR
        return any(root.startswith(below) for root in self.excluded)

    def is_counter(self, path: str) -> bool:
        """A sequence counter: a plain one, or a node of a ledger-id generator."""
        if self.ledger_root_of(path) is not None:
            return True
        if not path.startswith(self._counter_heads):
            return False
        return any(path.startswith(_literal_head(p)) and _matches(p, path) for p in self.counters)

    def ledger_root_of(self, path: str) -> str | None:
        """The ledgers root whose id generator ``path`` belongs to (``R/idgen``,
        ``R/idgen-long``, ``R/idgen-long/<any>``), else ``None``."""
        root = self._ledger_nodes.get(path)
        if root is not None or not path.startswith(self._hob_heads):
            return root
        head, _, name = path.rpartition(paths.SEPARATOR)
        return self._ledger_nodes.get(head) if name and head.endswith("/idgen-long") else None

    def is_generated_id(self, path: str) -> bool:
        """A child of a ledger-id generator's counter (``R/idgen/ID-…``,
        ``R/idgen-long/HOB-…/ID-…``): an ephemeral node the generators create and delete at once
        to take an id. A delta does not read them back: only their counter moves."""
        parent = paths.parent(path)
        if parent is None:
            return False
        root = self.ledger_root_of(parent)
        return root is not None and parent != paths.join(root, "idgen-long")

    def keeps_version(self, path: str) -> bool:
        """Whether the copy keeps the node's version. Not for the nodes of a ledger-id
        generator: on etcd their version *is* their counter (Pulsar's layout), which the
        generator's carry handles; nobody writes them conditionally."""
        return self.ledger_root_of(path) is None


def configured_rules(ledgers_roots: Sequence[str] | None = None, counters: Sequence[str] | None = None) -> Rules:
    """The copy's rules with the coordinator's settings ``coordinator.ledgers_roots`` and
    ``coordinator.counters`` (``None``: the copy's defaults)."""
    return Rules(
        counters=DEFAULT_COUNTERS if counters is None else tuple(counters),
        ledgers_roots=DEFAULT_LEDGERS_ROOTS if ledgers_roots is None else tuple(ledgers_roots),
    )


def _literal_head(pattern: str) -> str:
    return pattern.split("*", 1)[0]


def _matches(pattern: str, path: str) -> bool:
    want = pattern.split(paths.SEPARATOR)
    have = path.split(paths.SEPARATOR)
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


class Verdict(enum.Enum):
    EQUAL = "equal"
    """Same bytes, same version: nothing to do."""
    MISSING = "missing"
    """Not in the target: the copy creates it."""
    BEHIND = "behind"
    """In the target at a lower version (an interrupted copy): the copy writes on from there."""
    CONFLICT = "conflict"
    """The target is ahead, differs at the same version, or holds an ephemeral: the copy fails."""


@dataclass(frozen=True)
class Side:
    """A node as read from one store."""

    value: bytes
    version: int
    ephemeral: bool = False


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    kind: str
    """For reports: ``equal``, ``missing``, ``version``, ``value`` or ``ephemeral``."""
    detail: str


def judge(source: Side, target: Side | None, *, counter: bool = False, keep_version: bool = True) -> Judgement:
    """How the target's node stands against the source's, and why.

    A counter parent may be ahead in the target: on etcd its version *is* the sequence counter,
    which the copy advances past the source's version on purpose. Without ``keep_version``
    only the value counts (``Rules.keeps_version``): a different one is ``BEHIND``.
    """
    if target is None:
        return Judgement(Verdict.MISSING, "missing", "missing in the target")
    if target.ephemeral:
        return Judgement(Verdict.CONFLICT, "ephemeral", "the target holds an ephemeral node there")
    if not keep_version:
        if target.value == source.value:
            return Judgement(Verdict.EQUAL, "equal", "equal")
        return Judgement(Verdict.BEHIND, "value", f"value differs ({len(target.value)} bytes in the target, "
                                                  f"{len(source.value)} in the source)")
    if target.version < source.version:
        return Judgement(
            Verdict.BEHIND, "version", f"target version {target.version} is behind source version {source.version}"
        )
    if target.version > source.version and not counter:
        return Judgement(
            Verdict.CONFLICT, "version", f"target version {target.version} is ahead of source version {source.version}"
        )
    if target.value != source.value:
        return Judgement(
            Verdict.CONFLICT,
            "value",
            f"value differs at version {target.version} ({len(target.value)} bytes in the target, "
            f"{len(source.value)} in the source)",
        )
    return Judgement(Verdict.EQUAL, "equal", "equal")


def restore_version(source_version: int, target_version: int | None, keep_version: bool) -> int:
    """The version the copy brings a node to: the source's, or (``keep_version`` false) the
    least that writes the value: created at 0, else one write past the target's."""
    if keep_version:
        return source_version
    return 0 if target_version is None else target_version + 1
