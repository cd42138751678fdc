"""The tests' own servers start on free ports; a port chosen free can be taken by another process
(another test's server, an agent's ZooKeeper front) before the server binds it. Answering on the
port is then not proof of anything: the server must be the process listening there."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from metashift_lab.servers import LocalEtcd, LocalZooKeeper, ServerStartError


@pytest.fixture
def impostor() -> Iterator[int]:
    """A port taken by something that answers ZooKeeper's ``srvr`` (as the agent's front does)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4)
                conn.sendall(b"Zookeeper version: 3.8.4-impostor\nMode: standalone\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(5)
    sock.close()


@pytest.mark.parametrize("kind", ["zk", "etcd"])
def test_a_chosen_port_taken_meanwhile_means_other_ports(kind: str, impostor: int) -> None:
    server = LocalZooKeeper() if kind == "zk" else LocalEtcd()
    server.port = impostor  # as if another process took the free port between its choice and the bind
    try:
        server.start()
        assert server.port != impostor and server.running
        if isinstance(server, LocalZooKeeper):
            assert "impostor" not in server.four_letter("srvr") and "Mode:" in server.four_letter("srvr")
    finally:
        server.cleanup()


def test_a_port_given_and_taken_is_an_error_not_the_impostor(impostor: int) -> None:
    server = LocalZooKeeper(port=impostor)
    try:
        with pytest.raises(ServerStartError, match="exited"):
            server.start(timeout=60)
    finally:
        server.cleanup()
