"""The ordinary path: the ZooKeeper requests served through the ``MetadataStore`` API (every kind
of store), one collaborator per kind of request and one method per opcode:

- ``base``: ZooKeeper errors, path checks, the tree rules, the zxid;
- ``nodes``: ``Nodes``, the tree as ZooKeeper shows it (Stat, ``/zookeeper``, PIP-454's flag);
- ``reads``: ``Reads``, exists, getData, getChildren, getAllChildrenNumber, getEphemerals, sync;
- ``writes``: ``Writes``, create, delete, setData, check (the tree rules a store does not keep);
- ``sequential``: ``SequentialNames``, a create's new node and a sequential one's name;
- ``multi``: ``Multi``, multi (all or nothing, on the single writes' checks) and multiRead;
- ``runs``: ``WriteRuns``, a session's consecutive writes in one round where the store can;
- ``watch_requests``: ``WatchRequests``, setWatches, addWatch, removeWatches, checkWatches;
- ``acl``: ``AclRequests``, getACL, setACL, addAuth, whoAmI;
- ``dispatch``: ``Handlers``, the table from opcode to the collaborator's method.
"""

from metashift.agent.zookeeper.handlers.base import ZK_ROOT, ZkError, Zxid, check_path, error_code, is_virtual
from metashift.agent.zookeeper.handlers.dispatch import Handlers

__all__ = ["ZK_ROOT", "Handlers", "ZkError", "Zxid", "check_path", "error_code", "is_virtual"]
