"""``Restores``: the copy's writes of nodes at given versions on Oxia, one put per node.

``restore_many`` writes each node once with ``override_version_id`` = ``override_modifications_count``
= the version: what Pulsar reads natively (``version_id``) and what this store calls the version
(``modifications_count``) are both the source's version; conditional on the node being absent,
or on the ``version_id`` read with the expected count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..bulk import Restore
from ..errors import BadVersion, MetadataStoreError
from .records import Records


class Restores:
    """Brings records to given values at given versions by Oxia's version overrides."""

    def __init__(self, records: Records) -> None:
        self._records = records

    async def restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        """Each node in one put, all at once."""
        async def restore(item: Restore) -> int | MetadataStoreError:
            if item.current >= item.version:
                return 0
            try:
                expected = -1
                if item.current != -1:
                    current = await self._records.get(item.path, value=False)
                    if current is None or current.version.modifications_count != item.current:
                        raise BadVersion(item.path, "its version moved before it was restored")
                    expected = current.version.version_id
                await self._records.put(item.path, item.value, expected, False, override_version_id=item.version,
                                       override_modifications_count=item.version)
            except BadVersion:
                return BadVersion(item.path, "its version moved while it was restored")
            except MetadataStoreError as e:
                return e
            return 1

        return list(await asyncio.gather(*(restore(item) for item in items)))
