"""An Oxia cluster on loopback as the Pulsar Helm chart deploys it: ``oxia coordinator`` and data
servers (``oxia server``), namespace ``default`` with several shards of replication factor 3. Each
shard has its own leader, told by the shard assignments every data server streams to clients."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc

from metashift.stores.oxia.keys import key_hash
from metashift.stores.oxia.proto import client_pb2 as pb
from metashift.stores.oxia.proto import client_pb2_grpc as pb_grpc
from metashift_lab.secured.oxia import OxiaCoordinator, OxiaDataServer
from metashift_lab.servers import ServerStartError, oxia_binary

from .base import ELECTION_LIMIT, ReplicatedStore, StoreMember

#: The namespace the cluster serves (Pulsar's default).
NAMESPACE = "default"


def shard_assignments(address: str, timeout: float = 2.0) -> list[tuple[int, int, int, str]]:
    """(shard, lowest hash, highest hash, leader's public address) of every shard of ``default``,
    as the data server at ``address`` tells a client; raises ``grpc.RpcError`` when it does not."""
    with grpc.insecure_channel(address) as channel:
        stream = pb_grpc.OxiaClientStub(channel).GetShardAssignments(
            pb.ShardAssignmentsRequest(namespace=NAMESPACE), metadata=[("namespace", NAMESPACE)], timeout=timeout)
        try:
            first = next(stream)
        finally:
            stream.cancel()
    namespace = first.namespaces.get(NAMESPACE)
    if namespace is None:
        return []
    return [(a.shard, a.int32_hash_range.min_hash_inclusive, a.int32_hash_range.max_hash_inclusive, a.leader)
            for a in namespace.assignments]


class OxiaMember(OxiaDataServer, StoreMember):
    """One data server of an Oxia cluster (plaintext, no authentication)."""

    def __init__(self, data_dir: Path, index: int, cluster: OxiaCluster) -> None:
        super().__init__(data_dir, index, None, None)
        self.cluster = cluster

    def _choose_ports(self) -> None:  # the coordinator's configuration names them
        raise RuntimeError("a cluster member's ports are fixed")

    def serving(self) -> bool:
        """Every shard has a leader in what this server tells clients."""
        if not self.running:
            return False
        try:
            shards = shard_assignments(self.public, 1.0)
        except grpc.RpcError:
            return False
        return len(shards) == self.cluster.shards and all(leader for *_, leader in shards)


class OxiaCluster(ReplicatedStore):
    """An Oxia cluster: a coordinator and ``replicas`` data servers, ``shards`` shards of
    ``replication_factor`` replicas (3, or ``replicas`` when fewer)."""

    kind = "oxia"

    def __init__(self, directory: Path | None = None, replicas: int = 3, *, shards: int = 3,
                 replication_factor: int = 3) -> None:  # fmt: skip
        super().__init__(directory, "metashift-oxia-cluster-")
        self.shards = shards
        self.members: list[OxiaMember] = [  # type: ignore[assignment]
            OxiaMember(self.directory / f"server-{i}", i, self) for i in range(replicas)]
        self.coordinator = OxiaCoordinator(self.directory / "coordinator", list(self.members), shards,
                                           min(replication_factor, replicas))

    def url_in(self, order: Sequence[int] | None = None) -> str:
        return f"oxia://{self.hosts_in(order)}/{NAMESPACE}"

    def start(self, timeout: float = ELECTION_LIMIT) -> None:
        """Start the data servers, then the coordinator; return once every running server tells
        every shard's leader. Oxia 0.17.1's coordinator pushes the assignments to a fresh server
        once too early and again after its backoff: a new cluster serves 7 to 15 s after its start."""
        if oxia_binary() is None:
            raise ServerStartError("no Oxia binary: run make setup (it unpacks ../shared/tools/oxia into .cache/oxia)")
        try:
            for member in self.members:
                member.start(timeout)
            self.coordinator.start(timeout)
            self.wait_serving(timeout)
        except BaseException:
            self.stop()
            raise

    def assignments(self) -> list[tuple[int, int, int, str]]:
        """The shard assignments as the first running data server that answers tells them."""
        last: Exception | None = None
        for member in self.members:
            if not member.running:
                continue
            try:
                return shard_assignments(member.public)
            except grpc.RpcError as e:
                last = e
        raise LookupError(f"no Oxia data server tells the shard assignments ({last})")

    def shard_of(self, path: str) -> int:
        """The shard that holds the key of ``path`` (a store on the namespace, no key prefix)."""
        h = key_hash(path)
        for shard, low, high, _ in self.assignments():
            if low <= h <= high:
                return shard
        raise LookupError(f"no shard holds hash {h:#x}")

    def leader(self, path: str = "/") -> int:
        h = key_hash(path)
        for _, low, high, leader in self.assignments():
            if low <= h <= high:
                for index, member in enumerate(self.members):
                    if member.public == leader and member.running:
                        return index
                raise LookupError(f"the shard of {path} is led by {leader or 'nobody'}, not a running member")
        raise LookupError(f"no shard holds hash {h:#x}")

    def stop(self) -> None:
        self.coordinator.stop()
        super().stop()
