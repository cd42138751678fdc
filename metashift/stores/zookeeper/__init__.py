"""ZooKeeper backend of the store layer, on aiozk, with Pulsar's ``ZKMetadataStore`` semantics.

``store.py`` opens and closes it; ``protocol.py`` holds the aiozk workarounds (``addWatch``, the
retry policy, the connection and session); ``session.py`` the session's events; ``watches.py``
the notifications; ``operations.py`` single operations and ``multi``; ``bulk.py`` the walk,
restores and counters; ``errors.py`` the mapping of aiozk's errors.
"""

from __future__ import annotations

from .operations import DEFAULT_MAX_VALUE_SIZE
from .store import ZooKeeperStore

__all__ = ["DEFAULT_MAX_VALUE_SIZE", "ZooKeeperStore"]
