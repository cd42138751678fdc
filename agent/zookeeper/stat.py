"""A store ``Stat`` as ZooKeeper's Stat. Each field, and where it comes from (docs/reference.md,
"The ZooKeeper front", says the same for operators):

- ``version``: the store's version (ZooKeeper dataVersion; etcd version - 1).
- ``ctime`` / ``mtime``: the store's timestamps (ZooKeeper's own; 0 on etcd, which keeps none).
- ``dataLength``: the length of the value.
- ``numChildren``: counted from the store's child listing at the time of the reply.
- ``cversion``: ``numChildren`` (the store keeps no child-change counter; it never goes below the
  number of children, and changes when they do).
- ``aversion``: 0 (ACLs are not stored).
- ``ephemeralOwner``: the ZooKeeper session id of the agent's client session that owns the node;
  for an ephemeral of another owner (another agent, the agent itself) a non-zero id of that
  agent (``FOREIGN_OWNER``); 0 for a persistent node.
- ``mzxid``: the version (it changes on every data change of the node, which is what caches
  compare); ``czxid`` and ``pzxid``: 0 (no backend-neutral creation or child-change order).
"""

from __future__ import annotations

from metashift.stores import Stat
from metashift.stores.zookeeper.wire import ZStat

#: ephemeralOwner of an ephemeral node that no ZooKeeper session of this agent owns.
FOREIGN_OWNER = 0x7E7E_7E7E_7E7E_7E7E

#: The Stat of the virtual ``/zookeeper`` nodes.
VIRTUAL = ZStat()


def to_zstat(stat: Stat, data_length: int, num_children: int, owner: int) -> ZStat:
    """``stat`` as ZooKeeper shows it; ``owner``: the owning session's id (0 when unknown)."""
    ephemeral_owner = 0
    if stat.ephemeral:
        ephemeral_owner = owner or FOREIGN_OWNER
    return ZStat(
        czxid=0,
        mzxid=stat.version,
        ctime=stat.creation_timestamp,
        mtime=stat.modification_timestamp or stat.creation_timestamp,
        version=stat.version,
        cversion=num_children,
        aversion=0,
        ephemeral_owner=ephemeral_owner,
        data_length=data_length,
        num_children=num_children,
        pzxid=0,
    )
