"""The sandbox's two stores: a local server of each kind the run names (``--source``,
``--target``), or with ``--replicas`` a replicated store of that many members, each in a directory
of its own under the run's work directory (two stores even when both kinds are the same: a
migration never shares a store with itself)."""

from __future__ import annotations

from pathlib import Path

from metashift_lab.replicated import EtcdCluster, OxiaCluster, ReplicatedStore, ZooKeeperEnsemble
from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper

#: A local server of any kind.
LocalServer = LocalZooKeeper | LocalEtcd | LocalOxia
#: What the sandbox runs a store on: a single server, or a replicated store.
StoreServer = LocalServer | ReplicatedStore
#: The store kinds the sandbox runs, as ``--source`` and ``--target`` name them.
KINDS = ("zk", "etcd", "oxia")
#: How reports and progress lines name each kind.
STORE_NAMES = {"zk": "ZooKeeper", "etcd": "etcd", "oxia": "Oxia"}


def _zk_heap_mb(topics: int) -> int:
    # ZooKeeper holds the whole tree in its heap: ~0.7 KB a node and its garbage (at 512 MB a
    # 1M-node tree stalls it in GC for more than a client's timeout)
    return min(8192, 512 + topics // 48)


def local_server(kind: str, directory: Path, topics: int) -> LocalServer:
    """A server of ``kind`` (not started) keeping its data in ``directory``, sized for a tree of
    ``topics`` topics."""
    if kind == "zk":
        return LocalZooKeeper(directory, heap_mb=_zk_heap_mb(topics))
    if kind == "etcd":
        return LocalEtcd(directory)
    if kind == "oxia":
        return LocalOxia(directory)
    raise ValueError(f"unknown store kind {kind!r}: one of {', '.join(KINDS)}")


def store_server(kind: str, directory: Path, topics: int, replicas: int = 1) -> StoreServer:
    """The store of ``kind`` (not started) the sandbox runs on: a single server when ``replicas``
    is 1, else a replicated store of ``replicas`` members (Oxia: a coordinator and ``replicas``
    data servers, replication factor 3, 3 shards)."""
    if replicas == 1:
        return local_server(kind, directory, topics)
    if kind == "zk":
        return ZooKeeperEnsemble(directory, replicas, heap_mb=_zk_heap_mb(topics))
    if kind == "etcd":
        return EtcdCluster(directory, replicas)
    if kind == "oxia":
        return OxiaCluster(directory, replicas)
    raise ValueError(f"unknown store kind {kind!r}: one of {', '.join(KINDS)}")
