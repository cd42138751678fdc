"""etcd backend of the store layer (aetcd's generated gRPC stubs), in Pulsar's own
``EtcdMetadataStore`` layout, so that after a migration Pulsar can read etcd directly.

``store.py`` opens and closes it; ``connection.py`` holds the channel, failover and auth;
``lease.py`` the session lease and its keep-alive; ``watches.py`` the notifications; ``keys.py``
the mapping between keys and paths; ``operations.py`` single operations and batch txns;
``bulk.py`` the walk, restores, counters and compaction.
"""

from __future__ import annotations

from .operations import MAX_VALUE_SIZE
from .store import EtcdStore

__all__ = ["MAX_VALUE_SIZE", "EtcdStore"]
