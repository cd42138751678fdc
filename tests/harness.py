"""pytest plugin: real ZooKeeper and etcd servers for the test session.

One ZooKeeper and one etcd are started per test session on free loopback ports with temporary data
dirs, and stopped at the end, also on failure or Ctrl-C (finalizers, plus the launcher's atexit
hook). Every test gets its own namespace — a ZooKeeper chroot, an etcd key prefix — so tests never
see each other's data. Fault tests that stop a server get a dedicated one (``fresh_servers``), so
the shared servers are never disturbed.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from metashift.agent.stores import MetadataStore, open_store
from metashift.agent.stores.local_servers import LocalEtcd, LocalZooKeeper

BACKENDS = ("zk", "etcd")
_counter = itertools.count()


@pytest.fixture(scope="session")
def zk_server() -> Iterator[LocalZooKeeper]:
    server = LocalZooKeeper()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[LocalEtcd]:
    server = LocalEtcd()
    server.start()
    yield server
    server.cleanup()


def _namespace(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60].strip("-")
    return f"/t{next(_counter)}-{name}"


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A path unique to this test: the chroot / key prefix its URLs carry."""
    return _namespace(request)


@pytest.fixture
def zk_url(zk_server: LocalZooKeeper, namespace: str) -> str:
    return zk_server.url + namespace


@pytest.fixture
def etcd_url(etcd_server: LocalEtcd, namespace: str) -> str:
    return etcd_server.url + namespace


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The URL of an isolated namespace on the backend under test."""
    return str(request.getfixturevalue(f"{backend}_url"))


@pytest.fixture
async def open_stores() -> AsyncIterator[Callable[..., object]]:
    """A factory that opens stores and closes every one of them after the test."""
    opened: list[MetadataStore] = []

    async def _open(url: str) -> MetadataStore:
        store = await open_store(url)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        await store.close()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[MetadataStore]:
    s = await open_store(store_url)
    yield s
    await s.close()


class FreshServers:
    """Servers of a test's own, for tests that stop, kill or restart them."""

    def __init__(self) -> None:
        self.started: list[LocalZooKeeper | LocalEtcd] = []

    def zk(self, **kwargs: object) -> LocalZooKeeper:
        server = LocalZooKeeper(**kwargs)  # type: ignore[arg-type]
        server.start()
        self.started.append(server)
        return server

    def etcd(self, **kwargs: object) -> LocalEtcd:
        server = LocalEtcd(**kwargs)  # type: ignore[arg-type]
        server.start()
        self.started.append(server)
        return server

    def of(self, backend: str, **kwargs: object) -> LocalZooKeeper | LocalEtcd:
        return self.zk(**kwargs) if backend == "zk" else self.etcd(**kwargs)


@pytest.fixture
def fresh_servers() -> Iterator[FreshServers]:
    servers = FreshServers()
    yield servers
    for server in servers.started:
        server.cleanup()
