"""etcd backend of the store layer (aetcd's generated gRPC stubs), in Pulsar's own
``EtcdMetadataStore`` layout, so that after a migration Pulsar can read etcd directly.

``store.EtcdStore`` opens and closes it and delegates to its parts, one module each:

- ``connection``: the channel, failover and auth; ``lease``: the session lease and its keep-alive;
  ``keys``: the mapping between keys and paths;
- ``operations``: single operations and batch txns (``node_reads``: ``get_node`` calls sharing
  txns); ``tree_writes``: ZooKeeper's writes, a run in one txn;
- ``watches``: the notifications;
- ``tree_reads``: the copy's walk and reads of subtrees; ``restores``: its writes at given
  versions; ``sequence_counters``: counters raised by many blind puts (``repeat``);
  ``txn_budget``: the size of their txns; ``history``: positions, size and compaction.
"""

from __future__ import annotations

from .operations import MAX_VALUE_SIZE
from .store import EtcdStore

__all__ = ["MAX_VALUE_SIZE", "EtcdStore"]
