"""Fixtures of the ZooKeeper front's tests: the same client tests run against a real ZooKeeper
(``zookeeper``: the assertions are ZooKeeper's own behaviour) and against a metashift agent's
ZooKeeper port in front of ZooKeeper (``agent-zk``), of etcd (``agent-etcd``) and of Oxia
(``agent-oxia``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from metashift_lab.servers import LocalZooKeeper
from tests.harness import Gateways

TARGETS = ("zookeeper", "agent-zk", "agent-etcd", "agent-oxia")


def ensure_chroot(zk_server: LocalZooKeeper, namespace: str) -> None:
    k = KazooClient(hosts=f"127.0.0.1:{zk_server.port}", timeout=10)
    k.start(timeout=15)
    try:
        k.ensure_path(namespace)
    finally:
        k.stop()
        k.close()


async def zk_hosts(target: str, request: pytest.FixtureRequest, gateways: Gateways, **settings: Any) -> str:
    """The ``host:port[/chroot]`` a ZooKeeper client of this test dials for ``target``."""
    namespace = str(request.getfixturevalue("namespace"))
    if target == "zookeeper":
        server = request.getfixturevalue("zk_server")
        ensure_chroot(server, namespace)
        return f"127.0.0.1:{server.port}{namespace}"
    url = str(request.getfixturevalue(behind_url(target)))
    agent = await gateways.start(url, {"zookeeper.listen": "127.0.0.1:0", **settings})
    assert agent.zookeeper is not None
    return str(agent.zookeeper.address)


def behind_url(target: str) -> str:
    """The URL fixture of the store an agent target (``agent-zk``, ``agent-etcd``, ``agent-oxia``)
    serves from."""
    return f"{target.removeprefix('agent-')}_url"


class Kazoos:
    """Kazoo clients of one test, stopped after it."""

    def __init__(self, hosts: str) -> None:
        self.hosts = hosts
        self.clients: list[KazooClient] = []

    def new(self, **kwargs: Any) -> KazooClient:
        k = KazooClient(hosts=self.hosts, timeout=kwargs.pop("timeout", 10), **kwargs)
        k.start(timeout=15)
        self.clients.append(k)
        return k

    def close(self) -> None:
        for k in self.clients:
            try:
                k.stop()
                k.close()
            except Exception:
                pass


@pytest.fixture(params=TARGETS)
def zk_target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def zk_front(zk_target: str, request: pytest.FixtureRequest, gateways: Gateways) -> str:
    return await zk_hosts(zk_target, request, gateways)


@pytest.fixture
async def kazoos(zk_front: str) -> AsyncIterator[Kazoos]:
    """Kazoo is blocking and the agents run on the test's loop: test bodies run in a thread
    (``asyncio.to_thread``), and so does closing the clients."""
    k = Kazoos(zk_front)
    yield k
    await asyncio.to_thread(k.close)
