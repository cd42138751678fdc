"""ZooKeeper's four-letter words through the agent's ZooKeeper port, with the same assertions as
against a real ZooKeeper (the ``zookeeper`` target), and the clients that need them: kazoo's
``server_version()`` / ``command()``, and aiozk, whose every connection starts with ``srvr``."""

from __future__ import annotations

import asyncio
import re
import socket
import threading

from aiozk import ZKClient

from tests.zkfront import Kazoos

WORDS = ("ruok", "isro", "srvr", "stat", "cons", "wchs", "envi", "conf", "mntr")


def _ask(hosts: str, word: str) -> str:
    """Send ``word`` on a new connection and read the answer until the server closes."""
    host, port = hosts.split("/", 1)[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(word.encode())
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out.decode()


async def test_the_four_letter_words_answer_as_zookeeper_does(kazoos: Kazoos) -> None:
    def body() -> None:
        k = kazoos.new()  # one live session: cons and stat list it, wchs counts its watch
        k.create("/watched", b"")
        fired = threading.Event()
        k.get("/watched", watch=lambda _event: fired.set())
        said = {word: _ask(kazoos.hosts, word) for word in WORDS}
        assert said["ruok"] == "imok"
        assert said["isro"] == "rw"
        for word in ("srvr", "stat"):
            lines = said[word].splitlines()
            assert re.match(r"Zookeeper version: \d+\.\d+\.\d+-", lines[0]), said[word]
            assert "Mode: standalone" in lines and any(line.startswith("Zxid: 0x") for line in lines)
            assert any(re.fullmatch(r"Latency min/avg/max: \d+/[\d.]+/\d+", line) for line in lines)
            assert any(re.fullmatch(r"Connections: [1-9]\d*", line) for line in lines), said[word]
        assert "Clients:" in said["stat"].splitlines() and "/127.0.0.1:" in said["stat"]
        assert re.search(r"^ /127\.0\.0\.1:\d+\[\d+\]\(queued=\d+,recved=\d+,sent=\d+", said["cons"], re.M)
        assert re.search(r"^[1-9]\d* connections watching [1-9]\d* paths$", said["wchs"], re.M), said["wchs"]
        assert re.search(r"^Total watches:[1-9]\d*$", said["wchs"], re.M)
        envi = said["envi"].splitlines()
        assert envi[0] == "Environment:" and any(re.match(r"zookeeper\.version=\d+\.\d+\.\d+-", x) for x in envi)
        conf = dict(line.split("=", 1) for line in said["conf"].splitlines() if "=" in line)
        assert "clientPort" in conf and int(conf["maxSessionTimeout"]) >= int(conf["minSessionTimeout"]) > 0
        mntr = dict(line.split("\t", 1) for line in said["mntr"].splitlines())
        assert mntr["zk_server_state"] == "standalone" and re.match(r"\d+\.\d+\.\d+-", mntr["zk_version"])
        assert int(mntr["zk_num_alive_connections"]) >= 1 and int(mntr["zk_watch_count"]) >= 1
        assert not fired.is_set()

    await asyncio.to_thread(body)


async def test_kazoo_reads_the_server_version(kazoos: Kazoos) -> None:
    def body() -> None:
        k = kazoos.new()
        assert k.server_version() >= (3, 5, 0)  # read from ``envi``
        assert k.command(b"ruok") == "imok"

    await asyncio.to_thread(body)


async def test_aiozk_connects_its_handshake_asks_srvr(zk_front: str) -> None:
    servers, _, chroot = zk_front.partition("/")
    client = ZKClient(servers, chroot=f"/{chroot}" if chroot else None, session_timeout=10)
    await asyncio.wait_for(client.start(), 30)
    try:
        await client.create("/through-aiozk")
        await client.create("/through-aiozk/kid", b"hello")
        assert await client.get_data("/through-aiozk/kid") == b"hello"
        assert await client.get_children("/through-aiozk") == ["kid"]
    finally:
        await client.deleteall("/through-aiozk")
        await client.close()
