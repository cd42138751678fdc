"""The sandbox's simulated clients: brokers' and bookies' metadata clients talking to their own
agent through ``metashift.client``. Each holds an ephemeral (a broker's registration and maybe a
bundle ownership, a bookie's availability) and keeps writing: a compare-and-set counter of its
own, creates, sequential ids. Every write the agent acknowledged is remembered (path -> value),
every failure counted, every write timed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from metashift.stores import MetadataStore, MetadataStoreError, SessionEvent, StoreUnavailable, open_store
from metashift.stores.aio import wait_event

#: The sandbox's own subtree (counters and items); sequential ids go under ``/counters/<client>``.
WRITER_ROOT = "/sandbox"
COUNTER_ROOT = "/counters"
#: Pause between two rounds of writes of one client.
PAUSE = 0.05
#: Errors kept (as text) per client for the report.
ERRORS_KEPT = 5


#: How long a client keeps trying to open its session with its agent.
CONNECT_SECONDS = 120.0
#: How long a client keeps trying to register its ephemerals again on a new session (an old
#: session's node stays until the store expires that session).
REGISTER_SECONDS = 300.0


@dataclass
class WriteTiming:
    """One write: when it started (wall clock, s), how long it took (s), and whether it was
    acknowledged."""

    started: float
    seconds: float
    ok: bool


class ClientLoop:
    """A ``metashift.client`` session of one agent that works in a task of its own until stopped
    (what the sandbox's writers and the chaos run's registers share)."""

    name: str
    address: str
    client: Any
    _task: asyncio.Task[None] | None
    _stop: asyncio.Event

    async def connect(self) -> None:
        """Open its session, trying again while the agent does not answer, for at most
        ``CONNECT_SECONDS`` (a first attempt's HTTP/2 handshake timed out on a machine at load 19,
        although the agent served)."""
        from metashift.client import connect

        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            try:
                self.client = await connect(self.address, name=self.name, timeout=30.0)
                return
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        """Finish the operation in progress, then stop."""
        self._stop.set()
        if self._task is not None and not self._task.done():
            with contextlib.suppress(Exception):
                await self._task

    async def abandon(self) -> None:
        """Stop at once (its agent is gone, or the sandbox is interrupted): what was in flight
        stays unknown; cancel, close."""
        self._stop.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        await self.close()

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(client.close(), 10.0)


class FrontClient:
    """A session with an agent's ZooKeeper front, as a stock broker's ZooKeeper client has: the
    store layer's ZooKeeper client (aiozk) dialling the front, with ``metashift.client``'s per-call
    ``timeout`` (past it, ``StoreUnavailable``: a write's outcome is then unknown)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @classmethod
    async def connect(cls, front: str, call_timeout: float) -> FrontClient:
        # no notifications: the writers watch nothing
        return cls(await open_store(f"zk://{front}?timeout={call_timeout:g}", watch=False))

    async def get(self, path: str, *, timeout: float = CONNECT_SECONDS) -> Any:  # noqa: ASYNC109
        async with _answer_within(timeout, path):
            return await self.store.get(path)

    async def put(self, path: str, value: bytes, expected_version: int | None = None, *,
                  timeout: float = CONNECT_SECONDS,  # noqa: ASYNC109
                  ephemeral: bool = False, sequential: bool = False) -> Any:  # fmt: skip
        async with _answer_within(timeout, path):
            return await self.store.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)

    async def delete(self, path: str, expected_version: int | None = None, *,
                     timeout: float = CONNECT_SECONDS) -> None:  # noqa: ASYNC109
        async with _answer_within(timeout, path):
            await self.store.delete(path, expected_version)

    def add_session_listener(self, listener: Any) -> Any:
        return self.store.add_session_listener(listener)

    async def close(self) -> None:
        await self.store.close()


@contextlib.asynccontextmanager
async def _answer_within(seconds: float, path: str) -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise StoreUnavailable(f"no answer from the agent's ZooKeeper front within {seconds:g}s", path) from None


@dataclass
class SimClient(ClientLoop):
    """One metadata client of one agent (``name`` is unique in the sandbox)."""

    name: str
    node_id: str
    role: str
    address: str
    ephemerals: dict[str, bytes] = field(default_factory=dict)
    write_timeout: float = 300.0
    zookeeper: str | None = None
    """``host:port`` of its agent's ZooKeeper front: it speaks ZooKeeper's protocol there, as a
    stock broker does, instead of gRPC to ``address``."""
    client: Any = None
    acked: dict[str, bytes] = field(default_factory=dict)
    maybe: dict[str, set[bytes]] = field(default_factory=dict)
    """Path -> values written after its last acknowledged one whose outcome is unknown (the agent
    stopped answering, or was killed, while the write was in the store's hands): any of them may
    have replaced the acknowledged value."""
    failed: int = 0
    duplicates: list[str] = field(default_factory=list)
    """Sequential paths handed out twice (each also counts as a lost write)."""
    errors: list[str] = field(default_factory=list)
    timings: list[WriteTiming] = field(default_factory=list)
    stopped_early: bool = False
    """Its agent was killed: it stopped writing then."""
    registered_again: int = 0
    """Times it registered its ephemerals again on a re-established session."""
    _task: asyncio.Task[None] | None = None
    _registering: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(self) -> None:
        if self.zookeeper is None:
            await super().connect()
        else:
            self.client = await FrontClient.connect(self.zookeeper, self.write_timeout)

    @property
    def base(self) -> str:
        return f"{WRITER_ROOT}/{self.name}"

    @property
    def sequence_parent(self) -> str:
        return f"{COUNTER_ROOT}/{self.name}"

    async def start(self) -> None:
        """Take the ephemerals and the counter, then write in the background until ``stop``."""
        assert self.client is not None
        for path, value in self.ephemerals.items():
            await self.client.put(path, value, ephemeral=True)
        self.client.add_session_listener(self._session_event)
        await self.client.put(self.sequence_parent, b"", expected_version=-1)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"client {self.name}")

    def _session_event(self, event: SessionEvent) -> None:
        """As a broker's lock revalidation does: on a re-established session, check every
        ephemeral and make again those that are not its own any more."""
        if event is not SessionEvent.SESSION_REESTABLISHED or self._stop.is_set() or not self.ephemerals:
            return
        if self._registering is None or self._registering.done():
            self._registering = asyncio.get_running_loop().create_task(self._register_again(),
                                                                       name=f"client {self.name} registers")

    async def _register_again(self) -> None:
        pending = dict(self.ephemerals)
        deadline = time.monotonic() + REGISTER_SECONDS
        while pending and time.monotonic() < deadline and not self._stop.is_set():
            for path, value in list(pending.items()):
                try:
                    got = await self.client.get(path)
                    if got is not None and got[1].ephemeral and got[1].created_by_self:
                        del pending[path]
                        continue
                    if got is not None:  # the old session's, until the store expires it
                        await self.client.delete(path, expected_version=got[1].version)
                    await self.client.put(path, value, expected_version=-1, ephemeral=True)
                    del pending[path]
                except MetadataStoreError:  # gone or made meanwhile, the store away, the gate held it: again
                    pass
            if pending:
                await wait_event(self._stop, 0.5)
        if not pending:
            self.registered_again += 1

    async def stop(self) -> None:
        await super().stop()
        await self._stop_registering()

    async def abandon(self) -> None:
        await self._stop_registering()
        await super().abandon()

    async def _stop_registering(self) -> None:
        task, self._registering = self._registering, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _write(self, path: str, value: bytes, **kwargs: Any) -> Any:
        """One timed write; None when it failed (counted)."""
        started_wall, started = time.time(), time.monotonic()
        try:
            stat = await self.client.put(path, value, timeout=self.write_timeout, **kwargs)
        except asyncio.CancelledError:
            # abandoned in flight (its agent was killed): it may have reached the store all the same
            self.maybe.setdefault(path, set()).add(value)
            raise
        except MetadataStoreError as e:
            self.timings.append(WriteTiming(started_wall, time.monotonic() - started, False))
            if e.write_may_have_happened:
                self.maybe.setdefault(path, set()).add(value)
            self.failed += 1
            if len(self.errors) < ERRORS_KEPT:
                self.errors.append(f"{type(e).__name__}: {e}")
            return None
        self.timings.append(WriteTiming(started_wall, time.monotonic() - started, True))
        return stat

    async def _run(self) -> None:
        counter = f"{self.base}/counter"
        stat = await self.client.put(counter, b"0", expected_version=-1, timeout=self.write_timeout)
        self.acked[counter] = b"0"
        version = stat.version
        i = 0
        while not self._stop.is_set():
            i += 1
            value = str(i).encode()
            stat = await self._write(counter, value, expected_version=version)
            if stat is not None:
                version = stat.version
                self.acked[counter] = value
                self.maybe.pop(counter, None)
            else:
                version = await self._reread(counter, value, version)
            item, item_value = f"{self.base}/item-{i}", b"v%d" % i
            if await self._write(item, item_value, expected_version=-1) is not None:
                self.acked[item] = item_value
            if i % 5 == 0:
                seq_value = b"%s-%d" % (self.name.encode(), i)
                stat = await self._write(f"{self.sequence_parent}/id-", seq_value, sequential=True)
                if stat is not None:
                    if stat.path in self.acked:
                        self.duplicates.append(stat.path)
                    self.acked[stat.path] = seq_value
            await wait_event(self._stop, PAUSE)

    async def _reread(self, counter: str, attempted: bytes, version: int) -> int:
        """After a failed compare-and-set (its outcome may be unknown): where the counter stands.
        A write that did apply is the counter's newest value, whatever the answer said."""
        try:
            got = await self.client.get(counter, timeout=self.write_timeout)
        except MetadataStoreError:
            return version
        if got is None:
            return version
        if got[0] == attempted:
            self.acked[counter] = attempted
        return int(got[1].version)


    @property
    def writes_acknowledged(self) -> int:
        return sum(1 for t in self.timings if t.ok)

    def error(self) -> str | None:
        """The writing task's own failure (not a counted write failure), if it ended with one."""
        task = self._task
        if task is None or not task.done() or task.cancelled() or task.exception() is None:
            return None
        return repr(task.exception())


async def missing(clients: list[SimClient], store: MetadataStore, concurrency: int = 64) -> list[str]:
    """Every acknowledged write ``store`` does not hold with its acknowledged value (or a value
    written after it whose outcome is unknown, which may have replaced it)."""
    sem = asyncio.Semaphore(concurrency)
    out: list[str] = []

    async def check(path: str, value: bytes, maybe: set[bytes]) -> None:
        async with sem:
            got = await store.get(path)
        if got is None or (got[0] != value and got[0] not in maybe):
            out.append(f"{path}: acknowledged {value!r}, found {got[0] if got else None!r}")

    await asyncio.gather(*(check(p, v, c.maybe.get(p, set())) for c in clients for p, v in c.acked.items()))
    out.extend(f"{p}: sequential path handed out twice" for c in clients for p in c.duplicates)
    return sorted(out)


async def carried(clients: list[SimClient], store: MetadataStore) -> tuple[int, list[str]]:
    """How many of the live clients' ephemerals ``store`` holds, as ephemerals with their value;
    and the ones it does not."""
    count, absent = 0, []
    for c in clients:
        if c.stopped_early:
            continue
        for path, value in c.ephemerals.items():
            got = await store.get(path)
            if got is not None and got[0] == value and got[1].ephemeral:
                count += 1
            else:
                absent.append(path)
    return count, absent
