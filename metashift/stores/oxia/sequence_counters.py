"""``SequenceCounters``: the counters behind sequential children on Oxia.

The sequence counter of a parent is its ``modifications_count`` (a sequential put names its child
after the parent's count once it put the parent): ``advance_sequence_counter`` rewrites the
parent with its own value, ``override_modifications_count`` and its ``version_id`` kept, so a
broker reading Oxia natively still sees the parent's version it knew. On this store the
parent's version is its counter, as on etcd.
"""

from __future__ import annotations

from .. import paths
from ..errors import BadVersion
from .operations import Operations
from .records import Records


class SequenceCounters:
    """Reads a parent's counter (its modifications count) and sets it in one write."""

    def __init__(self, records: Records, operations: Operations) -> None:
        self._records = records
        self._operations = operations

    async def children_version(self, path: str) -> int | None:
        """The suffix of the next sequential child of ``path``: its ``modifications_count`` + 1
        (the put on the parent that a sequential put makes counts one more); ``None`` when ``path``
        does not exist (its first sequential child is then ``0000000000``)."""
        record = await self._records.get(paths.validate(path), value=False)
        return None if record is None else int(record.version.modifications_count) + 1

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """One write: the parent with its own value (created empty when missing), its count set to
        ``at_least - 1`` and its ``version_id`` kept; again if it moved in between."""
        paths.validate(parent)
        for _ in range(50):
            counter = await self.children_version(parent) or 0
            if counter >= at_least:
                return 0
            record = await self._records.get(parent)
            try:
                if record is None:
                    await self._operations.make_parents(parent)
                    await self._records.put(parent, b"", -1, False, override_modifications_count=at_least - 1)
                else:
                    version = record.version
                    await self._records.put(
                        parent, bytes(record.value), version.version_id, version.HasField("session_id"),
                        override_version_id=version.version_id, override_modifications_count=at_least - 1)
            except BadVersion:  # (AlreadyExists too) it moved under us: read it again
                continue
            return 1
        raise BadVersion(parent, "the sequence counter kept moving")
