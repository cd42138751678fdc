"""The sandbox's two stores: a local server of each kind the run names (``--source``,
``--target``), each in a directory of its own under the run's work directory (two servers even
when both kinds are the same: a migration never shares a store with itself)."""

from __future__ import annotations

from pathlib import Path

from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper

#: A local server of any kind.
LocalServer = LocalZooKeeper | LocalEtcd | LocalOxia
#: The store kinds the sandbox runs, as ``--source`` and ``--target`` name them.
KINDS = ("zk", "etcd", "oxia")
#: How reports and progress lines name each kind.
STORE_NAMES = {"zk": "ZooKeeper", "etcd": "etcd", "oxia": "Oxia"}


def local_server(kind: str, directory: Path, topics: int) -> LocalServer:
    """A server of ``kind`` (not started) keeping its data in ``directory``, sized for a tree of
    ``topics`` topics."""
    if kind == "zk":
        # ZooKeeper holds the whole tree in its heap: ~0.7 KB a node and its garbage (at 512 MB a
        # 1M-node tree stalls it in GC for more than a client's timeout)
        return LocalZooKeeper(directory, heap_mb=min(8192, 512 + topics // 48))
    if kind == "etcd":
        return LocalEtcd(directory)
    if kind == "oxia":
        return LocalOxia(directory)
    raise ValueError(f"unknown store kind {kind!r}: one of {', '.join(KINDS)}")
