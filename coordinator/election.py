"""Leader election among agents: whoever holds the ephemeral ``leader`` node coordinates."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from metashift.migration import paths
from metashift.stores import BadVersion, MetadataStore, MetadataStoreError, Notification

log = logging.getLogger(__name__)

#: How often a candidate looks again when no notification came.
POLL_SECONDS = 1.0


class LeaderElection:
    """One candidate: ``campaign`` returns once this agent's session holds the leader node."""

    def __init__(self, store: MetadataStore, node_id: str) -> None:
        self.store = store
        self.node_id = node_id

    async def campaign(self) -> None:
        changed = asyncio.Event()

        def on_change(n: Notification) -> None:
            if n.path == paths.LEADER:
                changed.set()

        remove = self.store.add_listener(on_change)
        try:
            while True:
                changed.clear()
                try:
                    if await self._try_take():
                        log.info("elected coordinator (%s)", self.node_id)
                        return
                except MetadataStoreError as e:
                    log.warning("election: %s", e)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), POLL_SECONDS)
        finally:
            remove()

    async def _try_take(self) -> bool:
        body = json.dumps({"nodeId": self.node_id}).encode()
        try:
            await self.store.put(paths.LEADER, body, expected_version=-1, ephemeral=True)
            return True
        except BadVersion:  # someone holds it: perhaps our own session still does
            return await self.holds()

    async def holds(self) -> bool:
        """True while this agent's store session owns the leader node."""
        got = await self.store.get(paths.LEADER)
        return got is not None and got[1].ephemeral and got[1].created_by_self

    async def leader(self) -> str | None:
        """The node id of the current leader, if any."""
        got = await self.store.get(paths.LEADER)
        if got is None:
            return None
        try:
            return str(json.loads(got[0])["nodeId"])
        except (ValueError, KeyError, TypeError):
            return None

    async def resign(self) -> None:
        with contextlib.suppress(MetadataStoreError):
            got = await self.store.get(paths.LEADER)
            if got is not None and got[1].created_by_self:
                await self.store.delete(paths.LEADER, expected_version=got[1].version)
