"""An etcd cluster on loopback (Debian's etcd 3.4): each member its client and peer ports and data
directory; the leader is the member whose id the members' status names as leader."""

from __future__ import annotations

import http.client
import json
import secrets
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from metashift_lab.ports import free_port

from .base import ReplicatedStore, StoreMember


def _post(port: int, path: str) -> dict[str, object]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=1) as r:
        answer = json.load(r)
    return answer if isinstance(answer, dict) else {}


class EtcdMember(StoreMember):
    """One member of an etcd cluster."""

    def __init__(self, data_dir: Path, index: int) -> None:
        self.name = f"etcd-{index}"
        super().__init__(data_dir, None)
        self.index = index
        self.peer_port = free_port()
        self.peers: list[EtcdMember] = []
        self.token = ""

    def _choose_ports(self) -> None:  # the peer ports are in every member's initial cluster
        raise RuntimeError("a cluster member's ports are fixed")

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def _command(self) -> list[str]:
        client = f"http://127.0.0.1:{self.port}"
        return [
            "etcd", "--name", self.name, "--data-dir", str(self.data_dir / "data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", ",".join(f"{p.name}={p.peer_url}" for p in self.peers),
            # ignored on a restart: the data directory holds the membership
            "--initial-cluster-state", "new", "--initial-cluster-token", self.token,
            "--logger", "zap", "--log-level", "warn",
        ]

    def status(self) -> tuple[int, int]:
        """(this member's id, the leader's id it knows; 0 for none); raises OSError while it
        does not answer."""
        try:
            answer = _post(self.port, "/v3/maintenance/status")
        except (ValueError, http.client.HTTPException) as e:
            raise OSError(str(e)) from None
        header = answer.get("header")
        member = int(header.get("member_id", 0)) if isinstance(header, dict) else 0
        return member, int(str(answer.get("leader", 0)))

    def serving(self) -> bool:
        if not self.running:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return bool(json.load(r).get("health") == "true")
        except (OSError, ValueError, http.client.HTTPException):
            return False


class EtcdCluster(ReplicatedStore):
    """An etcd cluster of ``replicas`` members."""

    kind = "etcd"

    def __init__(self, directory: Path | None = None, replicas: int = 3) -> None:
        super().__init__(directory, "metashift-etcd-cluster-")
        token = f"metashift-{secrets.token_hex(4)}"
        self.members: list[EtcdMember] = [  # type: ignore[assignment]
            EtcdMember(self.directory / f"etcd-{i}", i) for i in range(replicas)]
        for member in self.members:
            member.peers = list(self.members)
            member.token = token

    def url_in(self, order: Sequence[int] | None = None) -> str:
        return f"etcd://{self.hosts_in(order)}"

    def leader(self, path: str = "/") -> int:
        ids: dict[int, int] = {}
        leader = 0
        for index, member in enumerate(self.members):
            if not member.running:
                continue
            try:
                own, known = member.status()
            except OSError:
                continue
            ids[own] = index
            leader = leader or known
        if leader in ids:
            return ids[leader]
        raise LookupError("no running etcd member names a running leader")
