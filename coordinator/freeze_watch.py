"""The watch over the frozen source: from the moment every participant acknowledged, nothing
outside the migration's own subtree may change. A change means a writer that bypasses the agents;
a break in the change stream means changes may have been missed. Either fails the migration:
never complete on an incomplete copy."""

from __future__ import annotations

import logging
from collections.abc import Callable

from metashift.migration import paths
from metashift.stores import MetadataStore, Notification, NotificationType, SessionEvent

log = logging.getLogger(__name__)


class FreezeWatch:
    """Collects every change to the source outside ``/pulsar/migration-coordinator``."""

    def __init__(self, source: MetadataStore) -> None:
        self.source = source
        self.changed: dict[str, NotificationType] = {}
        self.broken: str | None = None
        self._removers: list[Callable[[], None]] = []

    @property
    def active(self) -> bool:
        return bool(self._removers)

    def start(self) -> None:
        if self.active:
            return
        self.changed.clear()
        self.broken = None
        self._removers = [
            self.source.add_listener(self._on_change),
            self.source.add_session_listener(self._on_session_event),
        ]

    def stop(self) -> None:
        for remove in self._removers:
            remove()
        self._removers = []

    def _on_change(self, n: Notification) -> None:
        # child lists change with every create and delete, which are reported on their own
        if n.type is NotificationType.CHILDREN_CHANGED or paths.is_protocol_path(n.path):
            return
        if n.type is not NotificationType.DELETED or n.path not in self.changed:
            self.changed[n.path] = n.type  # a write after a delete is what counts

    def _on_session_event(self, event: SessionEvent) -> None:
        if event in (SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST) and self.broken is None:
            self.broken = f"the coordinator's watch on the source broke ({event.value}): changes may have been missed"
            log.warning("%s", self.broken)

    async def violation(self, target: MetadataStore | None = None) -> str | None:
        """Why the frozen source cannot be trusted, or ``None``. A deleted node counts only when
        the target still has it (an ephemeral that went with a dead agent's session was never
        copied); with no ``target`` to ask, deletions wait for the final check."""
        if self.broken is not None:
            return self.broken
        for path, kind in sorted(self.changed.items()):
            if kind is NotificationType.DELETED:
                if target is None:
                    continue
                got = await self.source.get(path)
                if got is None and not await target.exists(path):
                    continue
            return f"{path} was written in the source during the freeze ({kind.value}), bypassing the agents"
        return None
