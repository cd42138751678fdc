"""pytest plugin: real ZooKeeper, etcd and Oxia servers for the test session.

One ZooKeeper, one etcd and one Oxia (four shards) are started per test session, when a test first
needs them, on free loopback ports with temporary data dirs, and stopped at the end, also on failure
or Ctrl-C (finalizers, plus the launcher's atexit hook). Every test gets its own namespace — a
ZooKeeper chroot, an etcd key prefix, an Oxia key prefix in the ``default`` namespace — so tests
never see each other's data. Without an Oxia binary (``make setup`` unpacks one) the Oxia tests are
skipped with the reason, except under ``CI=true``, where that fails them. Fault tests that stop a
server get a dedicated one (``fresh_servers``), so the shared servers are never disturbed.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import inspect
import io
import itertools
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from metashift.stores import MetadataStore, StoreUnavailable, open_store, reserved
from metashift.stores.simulated import SCHEME as SIMULATED_SCHEME
from metashift.stores.simulated import SimulatedServers
from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper, oxia_binary


async def eventually(check: Callable[[], bool | Awaitable[bool]], within: float = 10.0, what: str = "") -> None:
    """Poll ``check`` (plain or async) until it holds; fail the test after ``within`` seconds.
    A bound that turns a hang into a failure, never a timing assertion."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within}s: {what}")
        await asyncio.sleep(0.05)


def thread_states(pid: int) -> list[str]:
    """The scheduler state of each thread of process ``pid`` (``T``: stopped)."""
    states = []
    for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
        with contextlib.suppress(OSError):
            states.append(Path(stat).read_text().rsplit(")", 1)[1].split()[0])
    return states


def stop_process_group(pid: int, within: float = 30.0) -> None:
    """SIGSTOP to the process group ``pid``, returning once every thread of process ``pid`` is
    stopped. A group stop begins only when one of the process's threads takes the signal; until
    then its other threads run on, and on a loaded machine that was long enough for a server to
    answer a request sent after the kill (a test then saw a write acknowledged by a "stopped"
    store)."""
    os.killpg(pid, signal.SIGSTOP)
    deadline = time.monotonic() + within  # a bound, not a measure: threads stop within ms
    while set(thread_states(pid)) - {"T"}:
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not stop within {within}s: threads {thread_states(pid)}")
        time.sleep(0.01)


async def retry_while_unavailable(call: Callable[[], Awaitable[Any]], attempts: int, delay: float) -> Any:
    """``call()`` until it stops raising ``StoreUnavailable`` (a server coming back); the last
    attempt's error, if any, fails the test."""
    for _ in range(attempts - 1):
        try:
            return await call()
        except StoreUnavailable:
            await asyncio.sleep(delay)
    return await call()


async def user_roots(store: MetadataStore) -> list[str]:
    """The root's children, less metashift's own (``/metashift``: where every agent registers as a
    participant) and PIP-454's ``/pulsar/migration-coordinator`` if that is all ``/pulsar``
    holds: what clients wrote at the top level."""
    roots = [r for r in await store.get_children("/") if "/" + r != reserved.own_root()]
    if "pulsar" in roots and await store.get_children("/pulsar") == ["migration-coordinator"]:
        got = await store.get("/pulsar")
        if got is None or not got[0]:
            roots.remove("pulsar")
    return roots


def require_part(missing: str) -> NoReturn:
    """A part a test needs is missing (``missing`` says which and how to get it): under ``CI=true``
    the test fails, never skips silently; on a developer's machine it is skipped."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and a part the test needs is missing: {missing}")
    pytest.skip(missing)


BACKENDS = ("zk", "etcd", "oxia")
GATEWAY = "gateway-"
#: The same stores reached through an in-process metashift agent (client -> agent -> store). A test
#: module opts in by overriding ``backend`` with ``params=BACKENDS + GATEWAY_BACKENDS``.
GATEWAY_BACKENDS = ("gateway-zk", "gateway-etcd", "gateway-oxia")
#: The simulator's in-process store (``sim_url``), with one notification stream and with three
#: (``sim_streams_url``), which keeps the store contract too.
SIMULATED_BACKENDS = ("sim", "sim_streams")
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


def require_oxia() -> None:
    """Skip the test when no Oxia binary is installed, saying so; fail it under ``CI=true``, where
    a missing server must never pass for a green run."""
    if oxia_binary() is None:
        require_part("no Oxia server binary: run `make setup` (../shared/tools/oxia) or set METASHIFT_OXIA")


@pytest.fixture(scope="session")
def oxia_server() -> Iterator[LocalOxia]:
    require_oxia()
    server = LocalOxia()
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
def sim_url(namespace: str) -> str:
    """This test's root on the process's simulated store (``SIMULATED``)."""
    return f"{SIMULATED_SCHEME}://tests{namespace}"


@pytest.fixture
def sim_streams_url(namespace: str) -> str:
    """The same on a simulated store with three notification streams (Oxia's order)."""
    return f"{SIMULATED_SCHEME}://tests-streams{namespace}?streams=3"


@pytest.fixture
def zk_url(zk_server: LocalZooKeeper, namespace: str) -> str:
    return zk_server.url + namespace


@pytest.fixture
def etcd_url(etcd_server: LocalEtcd, namespace: str) -> str:
    return etcd_server.url + namespace


@pytest.fixture
def oxia_url(oxia_server: LocalOxia, namespace: str) -> str:
    """A key prefix of its own in the server's ``default`` namespace."""
    return oxia_server.url + namespace


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def store_kind(backend: str) -> str:
    """The store behind a backend name: "zk" for "zk" and "gateway-zk" (also "etcd", "oxia")."""
    return backend.removeprefix(GATEWAY)


async def open_any(url: str, **client_options: Any) -> MetadataStore:
    """A store URL opens the store; an agent address (``unix:...``, ``host:port``) connects a
    gateway client."""
    if url.startswith(("unix:", "tcp://")) or "://" not in url:
        from metashift.client import connect

        return await connect(url, **client_options)
    if url.startswith(f"{SIMULATED_SCHEME}://"):
        return await SIMULATED.open(url)
    return await open_store(url)


#: The simulated stores' in-process servers of this test process (``sim_url``), as the real
#: servers of the session fixtures are: one per process, each test on its own root.
SIMULATED = SimulatedServers()


class Gateways:
    """In-process metashift agents of a test, each on a unix socket of its own; all stopped after
    the test."""

    def __init__(self) -> None:
        self.agents: list[Any] = []
        self.dirs: list[str] = []

    def socket_path(self) -> str:
        directory = tempfile.mkdtemp(prefix="ms-agent-")  # short: unix socket paths max ~107 bytes
        self.dirs.append(directory)
        return f"{directory}/agent.sock"

    async def start(
        self, source_url: str, settings: dict[str, Any] | None = None, *, source: MetadataStore | None = None
    ) -> Any:
        """Start an agent in front of ``source_url``; ``agent.address`` is what clients dial.
        ``settings``: config keys (``{"gate.hold_timeout": 5}``); ``source``: an open store to use
        instead of opening ``source_url`` (the caller closes it)."""
        from metashift.agent.config import build
        from metashift.agent.server import Agent

        socket = self.socket_path()
        flat: dict[str, Any] = {
            "source.url": source_url, "listen": f"unix:{socket}", "node_id": "test-agent",
            # its own state dir: the default (/run/metashift) is the machine's, shared by every agent
            "session.state_dir": socket.rpartition("/")[0],
            "gate.drain_timeout": 2.0,
            # the agent's migration heartbeat (its lease on writing): 10 s rides out this test
            # process's event loop stalling a few seconds on a loaded machine (the default is 5)
            "coordinator.participant_timeout": 10.0,
        }
        flat.update(settings or {})
        agent = Agent(build(flat), source=source)
        await agent.start()
        self.agents.append(agent)
        return agent

    async def stop_all(self) -> None:
        for agent in reversed(self.agents):
            await agent.stop(grace=1.0)
        self.agents.clear()
        for directory in self.dirs:
            shutil.rmtree(directory, ignore_errors=True)


#: A fixture's teardown (closing stores and clients, stopping agents) that takes longer than this
#: is a bug: it fails with every asyncio task's stack instead of hanging.
TEARDOWN_LIMIT = 60.0


async def bounded_teardown(what: str, teardown: Awaitable[Any]) -> None:
    try:
        await asyncio.wait_for(teardown, TEARDOWN_LIMIT)
    except TimeoutError:
        stacks = io.StringIO()
        for task in asyncio.all_tasks():
            print(f"--- {task!r}", file=stacks)
            task.print_stack(file=stacks)
        pytest.fail(f"teardown of {what} did not end within {TEARDOWN_LIMIT}s; tasks:\n{stacks.getvalue()}")


@pytest.fixture
async def gateways() -> AsyncIterator[Gateways]:
    g = Gateways()
    yield g
    await bounded_teardown("the agents", g.stop_all())


@pytest.fixture
async def agent(gateways: Gateways, zk_url: str) -> Any:
    """An in-process agent in front of this test's ZooKeeper namespace."""
    return await gateways.start(zk_url)


@pytest.fixture
async def direct(zk_url: str, open_stores: Callable[..., Any]) -> Any:
    """The same ZooKeeper namespace as ``agent``'s, opened directly (not through the agent)."""
    return await open_stores(zk_url)


@pytest.fixture
async def store_url(backend: str, request: pytest.FixtureRequest, gateways: Gateways) -> str:
    """The URL of an isolated namespace on the backend under test; for a gateway backend, the
    address of an agent in front of that namespace."""
    url = str(request.getfixturevalue(f"{store_kind(backend)}_url"))
    if backend.startswith(GATEWAY):
        agent = await gateways.start(url)
        return str(agent.address)
    return url


@pytest.fixture
async def open_stores() -> AsyncIterator[Callable[..., object]]:
    """A factory that opens stores (or gateway clients, see ``open_any``) and closes every one of
    them after the test."""
    opened: list[MetadataStore] = []

    async def _open(url: str, **client_options: Any) -> MetadataStore:
        store = await open_any(url, **client_options)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        await bounded_teardown(f"store {store.url}", store.close())


@pytest.fixture
async def open_backend(backend: str, gateways: Gateways, open_stores: Callable[..., Any]) -> Callable[..., Any]:
    """Open the store at a real store URL the way ``backend`` says: directly, or through a fresh
    agent in front of it. Closed after the test."""

    async def _open(url: str) -> MetadataStore:
        if backend.startswith(GATEWAY):
            agent = await gateways.start(url)
            return await open_stores(agent.address)
        return await open_stores(url)

    return _open


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[MetadataStore]:
    s = await open_any(store_url)
    yield s
    await bounded_teardown(f"store {store_url}", s.close())


class FreshServers:
    """Servers of a test's own, for tests that stop, kill or restart them."""

    def __init__(self) -> None:
        self.started: list[LocalZooKeeper | LocalEtcd | LocalOxia] = []

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

    def oxia(self, **kwargs: object) -> LocalOxia:
        require_oxia()
        server = LocalOxia(**kwargs)  # type: ignore[arg-type]
        server.start()
        self.started.append(server)
        return server

    def of(self, backend: str, **kwargs: object) -> LocalZooKeeper | LocalEtcd | LocalOxia:
        kind = store_kind(backend)
        return self.zk(**kwargs) if kind == "zk" else self.oxia(**kwargs) if kind == "oxia" else self.etcd(**kwargs)


@pytest.fixture
def fresh_servers() -> Iterator[FreshServers]:
    servers = FreshServers()
    yield servers
    for server in servers.started:
        server.cleanup()
