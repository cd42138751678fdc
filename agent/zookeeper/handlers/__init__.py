"""The ZooKeeper requests, one module per kind:

- ``base``: ZooKeeper errors, path checks, the zxid, what every handler shares (``HandlerBase``);
- ``writes``: create, delete, setData, check (the tree rules a store does not keep, sequential names);
- ``reads``: exists, getData, getChildren, getAllChildrenNumber, getEphemerals, sync;
- ``multi``: multi (all or nothing, on the single writes' checks) and multiRead;
- ``watch_requests``: setWatches, addWatch, removeWatches, checkWatches;
- ``acl``: getACL, setACL, addAuth, whoAmI;
- ``dispatch``: ``Handlers``, the table from opcode to handler.
"""

from metashift.agent.zookeeper.handlers.base import ZK_ROOT, ZkError, Zxid, check_path, error_code, is_virtual
from metashift.agent.zookeeper.handlers.dispatch import Handlers

__all__ = ["ZK_ROOT", "Handlers", "ZkError", "Zxid", "check_path", "error_code", "is_virtual"]
