"""A ZooKeeper ensemble on loopback (Debian's ZooKeeper 3.8, ``QuorumPeerMain``): each member its
client, quorum and election ports, its ``myid`` and data directory; the leader is the member whose
``srvr`` says ``Mode: leader``."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path

from metashift_lab.jvm import LEAN_JVM_FLAGS
from metashift_lab.ports import free_port
from metashift_lab.servers import ZOOKEEPER_CLASSPATH, ZOOKEEPER_LAB_SETTINGS

from .base import ReplicatedStore, StoreMember


def four_letter(port: int, word: str) -> str:
    """A four-letter command's answer from ``127.0.0.1:port``, '' when nobody answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class EnsembleMember(StoreMember):
    """One server of a ZooKeeper ensemble."""

    def __init__(self, data_dir: Path, myid: int, heap_mb: int) -> None:
        self.name = f"zookeeper-{myid}"
        super().__init__(data_dir, None)
        self.myid = myid
        self.heap_mb = heap_mb
        self.quorum_port = free_port()
        self.election_port = free_port()
        self.peers: list[EnsembleMember] = []

    def _choose_ports(self) -> None:  # the ports are in every member's zoo.cfg: never chosen again
        raise RuntimeError("an ensemble member's ports are fixed")

    def _command(self) -> list[str]:
        data = self.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{self.myid}\n")
        lines = [
            "tickTime=2000",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={data}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "maxClientCnxns=0",
            "minSessionTimeout=2000",
            "maxSessionTimeout=120000",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
            *ZOOKEEPER_LAB_SETTINGS,
            *(f"server.{p.myid}=127.0.0.1:{p.quorum_port}:{p.election_port}" for p in self.peers),
        ]
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        return [
            "java", f"-Xmx{self.heap_mb}m", *LEAN_JVM_FLAGS, "-Dzookeeper.admin.enableServer=false",
            "-cp", ":".join(ZOOKEEPER_CLASSPATH), "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg),
        ]

    def mode(self) -> str:
        """``leader``, ``follower``, or '' while the member does not serve."""
        for line in four_letter(self.port, "srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def serving(self) -> bool:
        return self.running and self.mode() in ("leader", "follower")

    def four_letter(self, word: str) -> str:
        return four_letter(self.port, word)


class ZooKeeperEnsemble(ReplicatedStore):
    """A ZooKeeper ensemble of ``replicas`` servers."""

    kind = "zookeeper"

    def __init__(self, directory: Path | None = None, replicas: int = 3, *, heap_mb: int = 256) -> None:
        super().__init__(directory, "metashift-zk-ensemble-")
        self.members: list[EnsembleMember] = [  # type: ignore[assignment]
            EnsembleMember(self.directory / f"zookeeper-{i}", i + 1, heap_mb) for i in range(replicas)]
        for member in self.members:
            member.peers = list(self.members)

    def url_in(self, order: Sequence[int] | None = None) -> str:
        return f"zk://{self.hosts_in(order)}"

    def leader(self, path: str = "/") -> int:
        for index, member in enumerate(self.members):
            if member.running and member.mode() == "leader":
                return index
        raise LookupError("no ZooKeeper server says Mode: leader")
