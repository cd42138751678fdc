"""The rules the copy and its verification share: what is copied, which nodes are sequence
counters, and how a target node compares with its source node.

Both jobs call ``judge`` on the same inputs, so a node the copy leaves alone is a node the
verification accepts, and the other way round.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from metashift.stores import paths

#: Subtrees never copied: ZooKeeper's own, and the migration's control nodes (PIP-454).
DEFAULT_EXCLUDED = ("/zookeeper", "/pulsar/migration-coordinator")
#: Parents whose sequential children's suffixes must keep growing (BookKeeper's ledger ids,
#: Pulsar's producer-name counter). ``*`` matches one path segment.
DEFAULT_COUNTERS = ("/ledgers/idgen", "/ledgers/idgen-long", "/ledgers/idgen-long/*", "/counters/*")


@dataclass(frozen=True)
class Rules:
    """What the copy and the verification cover. Plain data: it travels to Spark executors."""

    excluded: tuple[str, ...] = DEFAULT_EXCLUDED
    counters: tuple[str, ...] = DEFAULT_COUNTERS
    _excluded_below: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    _counter_heads: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for root in self.excluded:
            paths.validate(root)
        for pattern in self.counters:
            paths.validate(pattern)
        # checked for every node, several times: a str.startswith of a tuple rejects most paths
        # at once (derived from the fields)
        below = tuple(r if r == paths.SEPARATOR else r + paths.SEPARATOR for r in self.excluded)
        object.__setattr__(self, "_excluded_below", below)
        object.__setattr__(self, "_counter_heads", tuple(_literal_head(p) for p in self.counters))

    def is_excluded(self, path: str) -> bool:
        return path in self.excluded or path.startswith(self._excluded_below)

    def is_counter(self, path: str) -> bool:
        if not path.startswith(self._counter_heads):
            return False
        return any(path.startswith(_literal_head(p)) and _matches(p, path) for p in self.counters)


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


def judge(source: Side, target: Side | None, *, counter: bool = False) -> Judgement:
    """How the target's node stands against the source's, and why.

    A counter parent may be ahead in the target: on etcd its version *is* the sequence counter,
    which the copy advances past the source's version on purpose.
    """
    if target is None:
        return Judgement(Verdict.MISSING, "missing", "missing in the target")
    if target.ephemeral:
        return Judgement(Verdict.CONFLICT, "ephemeral", "the target holds an ephemeral node there")
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


def counter_ok(source_counter: int, target_counter: int) -> bool:
    """The target's next sequential suffix must be past every suffix the source handed out."""
    return target_counter >= source_counter
