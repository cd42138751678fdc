"""Replicated stores on loopback, as production runs them: a ZooKeeper ensemble, an etcd cluster
and an Oxia cluster (a coordinator and data servers, replication factor 3, several shards), each
member a child process with its own directory, its leader found from the store itself, any
member killed and restarted one at a time (``ReplicatedStore``)."""

from __future__ import annotations

from pathlib import Path

from .base import ReplicatedStore, StoreMember
from .etcd import EtcdCluster
from .oxia import OxiaCluster
from .zookeeper import ZooKeeperEnsemble

__all__ = ["EtcdCluster", "OxiaCluster", "ReplicatedStore", "StoreMember", "ZooKeeperEnsemble", "replicated"]


def replicated(kind: str, directory: Path | None = None, replicas: int = 3) -> ReplicatedStore:
    """A replicated store of ``kind`` (``zk``, ``etcd``, ``oxia``), not started, of ``replicas``
    members."""
    if kind == "zk":
        return ZooKeeperEnsemble(directory, replicas)
    if kind == "etcd":
        return EtcdCluster(directory, replicas)
    if kind == "oxia":
        return OxiaCluster(directory, replicas)
    raise ValueError(f"unknown store kind {kind!r}: one of zk, etcd, oxia")
