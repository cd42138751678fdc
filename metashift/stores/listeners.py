"""Who listens to a store, and to which subtree: the store watches only what its listeners ask for.

A store's server sends it an event for every write it watches, and receiving one costs the
agent more than the write it serves (read off the socket, parsed, handed to every listener). So a
store watches nothing until a listener asks, and then only the subtrees its listeners asked for
(``under``): an agent that follows only the migration's own subtree is not sent the cluster's
every write. The store's implementation is told when the set of subtrees to watch changes
(``Listeners.roots``: none below another) and watches exactly those.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from . import paths
from .notifications import Notification, NotificationListener

log = logging.getLogger(__name__)

#: Told the subtrees to start watching and those to stop watching.
ScopeChange = Callable[[frozenset[str], frozenset[str]], None]


def covering(prefixes: Iterable[str]) -> frozenset[str]:
    """The fewest subtrees that cover every one of ``prefixes`` (none below another)."""
    ordered = sorted(set(prefixes), key=lambda p: (p.count(paths.SEPARATOR), p))
    roots: list[str] = []
    for prefix in ordered:
        if not any(paths.is_under(prefix, root) for root in roots):
            roots.append(prefix)
    return frozenset(roots)


class Listeners:
    """A store's notification listeners, each with the subtree it listens to."""

    def __init__(self, on_scope_change: ScopeChange) -> None:
        self._entries: list[tuple[NotificationListener, str]] = []
        self._on_scope_change = on_scope_change
        self.roots: frozenset[str] = frozenset()
        """The subtrees the store must watch: every listener's, none below another."""

    def add(self, listener: NotificationListener, under: str) -> Callable[[], None]:
        """Call ``listener`` for every change at or below ``under``; returns its remover."""
        entry = (listener, paths.validate(under))
        self._entries.append(entry)
        self._rescope()

        def remove() -> None:
            if entry in self._entries:
                self._entries.remove(entry)
                self._rescope()

        return remove

    def _rescope(self) -> None:
        roots = covering(under for _, under in self._entries)
        if roots != self.roots:
            added, removed = roots - self.roots, self.roots - roots
            self.roots = roots
            self._on_scope_change(added, removed)

    def notify(self, notification: Notification) -> None:
        """Hand ``notification`` to every listener of a subtree it is in."""
        for listener, under in list(self._entries):
            if under != paths.SEPARATOR and not paths.is_under(notification.path, under):
                continue
            try:
                listener(notification)
            except Exception:  # a listener's bug must not stop the store's event loop
                log.exception("notification listener failed for %s", notification)
