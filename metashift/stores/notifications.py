"""What a store tells its listeners: changes to nodes, and events of its session."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class NotificationType(enum.Enum):
    """The kind of change a ``Notification`` reports (Pulsar's ``NotificationType``)."""

    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True)
class Notification:
    """A change to the node at ``path``."""

    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    """A change of the store's session (Pulsar's ``SessionEvent``)."""

    CONNECTION_LOST = "ConnectionLost"
    RECONNECTED = "Reconnected"
    SESSION_LOST = "SessionLost"
    SESSION_REESTABLISHED = "SessionReestablished"


NotificationListener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]
