"""The agent's home: the store its cluster lives on. The migration flag that governs the agent is
read there, the agent registers and beats there, and its coordinator candidate leads there.

It starts as the configured source and moves to the target of every migration that completes,
so that a reverse migration (the rollback) runs from where the cluster now lives, with the same
agents and no restart.
"""

from __future__ import annotations

import asyncio

from metashift.stores import MetadataStore


class Home:
    """A reference to the home store that the participant moves and the coordinator follows."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.moves = 0
        """How many times the home moved (a completed migration each)."""
        self._moved = asyncio.Event()

    def move(self, store: MetadataStore) -> None:
        self.store = store
        self.moves += 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def wait_moved(self) -> None:
        """Return at the next move."""
        await self._moved.wait()
