"""The operations of a batch (``MetadataStore.batch``) and their results.

A batch is a list of independent operations sent together for speed (Pulsar batches the same
way): each gets its own result, and one failing does not undo the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import MetadataStoreError
from .stat import Stat


@dataclass(frozen=True)
class GetOp:
    """Read the value and Stat of ``path`` (``MetadataStore.get``)."""

    path: str


@dataclass(frozen=True)
class GetChildrenOp:
    """List the children of ``path`` (``MetadataStore.get_children``)."""

    path: str


@dataclass(frozen=True)
class ExistsOp:
    """Ask whether ``path`` exists (``MetadataStore.exists``)."""

    path: str


@dataclass(frozen=True)
class PutOp:
    """Write ``value`` at ``path`` (``MetadataStore.put``)."""

    path: str
    value: bytes
    expected_version: int | None = None
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class DeleteOp:
    """Delete ``path`` (``MetadataStore.delete``)."""

    path: str
    expected_version: int | None = None


Op = GetOp | GetChildrenOp | ExistsOp | PutOp | DeleteOp
GetResult = tuple[bytes, Stat] | None
OpResult = GetResult | list[str] | bool | Stat | None | MetadataStoreError
