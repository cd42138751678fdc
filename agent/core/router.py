"""Which store the agent's reads and writes go to: the source, or (after a migration) the target.

The router only points; the write gate decides when writes may flow. Listeners hear every switch
so that notification and session-event subscriptions follow the active store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from metashift.stores import MetadataStore, Notification

log = logging.getLogger(__name__)

SwitchListener = Callable[[MetadataStore, MetadataStore], None]


def _ignore(notification: Notification) -> None:
    """A listener that only keeps a watch up."""


class Router:
    """Points reads and writes at the source or the target store."""

    def __init__(self, source: MetadataStore) -> None:
        self.source = source
        self.target: MetadataStore | None = None
        self.active = source
        self._listeners: list[SwitchListener] = []

    @property
    def active_name(self) -> str:
        return "source" if self.active is self.source else "target"

    def switch(self, store: MetadataStore) -> None:
        """Route reads and writes to ``store`` (the source or the target) from now on."""
        if store is not self.source and store is not self.target:
            self.target = store
        if store is self.active:
            return
        old, self.active = self.active, store
        log.info("routing to %s (%s)", self.active_name, store.url)
        for listener in list(self._listeners):
            listener(old, store)

    async def switch_watching(self, store: MetadataStore) -> None:
        """``switch`` to ``store`` once it watches the subtrees the active store watches for its
        listeners (which the switch moves to it), so that they miss no change made after it."""
        holds = [store.add_listener(_ignore, under=p) for p in self.active.watched] if store is not self.active else []
        try:
            await store.watch_ready()
            self.switch(store)
        finally:
            for release in holds:
                release()

    def on_switch(self, listener: SwitchListener) -> None:
        self._listeners.append(listener)
