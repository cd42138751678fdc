"""Outages: whether the source and the target answer, and how long they have not.

In SYNCING a store that does not answer costs a wait and another full pass, up to
``coordinator.outage_timeout``; inside the freeze, where every write waits, up to
``coordinator.participant_timeout`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from metashift.migration import paths
from metashift.stores import MetadataStore, MetadataStoreError, Store, StoreUnavailable

log = logging.getLogger(__name__)

#: Longest wait for one probe's answer.
PROBE_SECONDS = 2.0


class Reachability:
    """Probes the source and one target (a connection of its own, kept open between probes)."""

    def __init__(self, source: MetadataStore, open_target: Callable[[str], Awaitable[Store]]) -> None:
        self.source = source
        self._open_target = open_target
        self._target: Store | None = None
        self._target_url = ""
        self.down_since: float | None = None
        """When a probe first failed (monotonic) since the last one that found both answering."""

    async def probe(self, target_url: str) -> str | None:
        """``None`` when both stores answer now, else which one did not and why."""
        why = await self._why_down(target_url)
        if why is None:
            self.down_since = None
        elif self.down_since is None:
            self.down_since = time.monotonic()
        return why

    @property
    def down_for(self) -> float:
        return time.monotonic() - self.down_since if self.down_since is not None else 0.0

    async def _why_down(self, target_url: str) -> str | None:
        try:
            await asyncio.wait_for(self.source.exists(paths.ROOT), PROBE_SECONDS)
        except (TimeoutError, StoreUnavailable) as e:
            return f"the source {self.source.url} did not answer ({e or 'no answer in time'})"
        try:
            target = await asyncio.wait_for(self._target_store(target_url), PROBE_SECONDS * 2)
            await asyncio.wait_for(target.exists("/"), PROBE_SECONDS)
        except (TimeoutError, StoreUnavailable) as e:
            return f"the target {target_url} did not answer ({e or 'no answer in time'})"
        return None

    async def _target_store(self, url: str) -> Store:
        if self._target is None or self._target_url != url:
            await self.close()
            self._target = await self._open_target(url)
            self._target_url = url
        return self._target

    async def close(self) -> None:
        target, self._target = self._target, None
        if target is not None:
            with contextlib.suppress(MetadataStoreError, Exception):
                await asyncio.wait_for(target.close(), PROBE_SECONDS * 2)
