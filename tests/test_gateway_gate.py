"""The write gate through the gateway: a closed gate holds writes, drains those in flight, releases
held writes in order to the chosen store, fails them with HeldForMigration when the caller's
deadline comes first, and loses or doubles no write under concurrent load."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from metashift import MetadataStore, Stat, Store
from metashift.client import AgentClient, HeldForMigration
from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc
from metashift.stores import GetOp
from metashift.stores.errors import MetadataStoreError
from tests.gateway_support import SlowStore
from tests.harness import Gateways, eventually


async def _until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached")
        await asyncio.sleep(0.01)


def _held_is(gate: Any, n: int) -> Callable[[], bool]:
    return lambda: bool(gate.held == n)


async def _held_in_order(client: AgentClient, agent: Any, path: str, n: int) -> list[asyncio.Task[Stat]]:
    """Start ``n`` blind puts of 0..n-1 at ``path``, each one held before the next starts."""
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(client.put(path, str(i).encode())))
        await _until(_held_is(agent.gate, i + 1))
    return tasks


async def test_closed_gate_holds_writes_and_releases_them_in_order_to_the_source(
    agent: Any, direct: Any, open_stores: Callable[..., Any]
) -> None:
    client: AgentClient = await open_stores(agent.address)
    other: AgentClient = await open_stores(agent.address)
    await client.put("/ordered", b"start", expected_version=-1)
    assert await agent.gate.close() == 0
    tasks = await _held_in_order(client, agent, "/ordered", 25)
    # reads wait too (a frozen source may be stale by the time the gate reopens elsewhere)
    read = asyncio.create_task(other.get("/ordered"))
    await asyncio.sleep(0.2)
    assert not any(t.done() for t in tasks) and not read.done()
    got = await direct.get("/ordered")
    assert got is not None and got[0] == b"start" and got[1].version == 0  # nothing written yet
    assert agent.metrics.held_writes._value.get() == 25

    released = await agent.gate.open()
    assert released == 25
    stats = await asyncio.gather(*tasks)
    assert [s.version for s in stats] == list(range(1, 26))  # applied in arrival order
    got = await read  # answered once the gate reopened: the value then, or a later one
    assert got is not None and got[0] == (b"start" if got[1].version == 0 else str(got[1].version - 1).encode())
    got = await direct.get("/ordered")
    assert got is not None and got[0] == b"24" and got[1].version == 25
    assert agent.metrics.held_writes._value.get() == 0


async def test_held_writes_are_released_to_the_target(
    agent: Any, direct: Any, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    client: AgentClient = await open_stores(agent.address)
    target: MetadataStore = await open_stores(etcd_url)
    await agent.gate.close()
    tasks = await _held_in_order(client, agent, "/moved", 10)
    eph = asyncio.create_task(client.put("/moved-eph", b"e", ephemeral=True))
    await _until(lambda: agent.gate.held == 11)
    await agent.gate.open(towards=target)
    assert agent.router.active is target and agent.router.active_name == "target"
    stats = await asyncio.gather(*tasks)
    assert [s.version for s in stats] == list(range(10))
    assert (await eph).ephemeral
    got = await target.get("/moved")
    assert got is not None and got[0] == b"9" and got[1].version == 9
    assert not await direct.exists("/moved") and not await direct.exists("/moved-eph")  # nothing reached the source
    # reads follow the router too
    got = await client.get("/moved")
    assert got is not None and got[0] == b"9"
    assert agent.registry.ephemerals() == {"/moved-eph": b"e"}


async def test_reads_held_in_the_freeze_are_answered_from_the_store_the_gate_opens_towards(
    agent: Any, direct: Any, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    """Every kind of read waits while the gate is closed, then reads the store the gate opened
    towards: the target's value, never the frozen source's."""
    client: AgentClient = await open_stores(agent.address)
    target: MetadataStore = await open_stores(etcd_url)
    await client.put("/r", b"source", expected_version=-1)
    await client.put("/r/child-s", b"", expected_version=-1)
    await target.put("/r", b"target", expected_version=-1)
    await target.put("/r/child-t", b"", expected_version=-1)
    await agent.gate.close()
    # each its own call (a deadline of its own: not coalesced into one Batch with the others)
    get, children, exists, many = (asyncio.create_task(client.get("/r", timeout=30)),
                                   asyncio.create_task(client.get_children("/r", timeout=30)),
                                   asyncio.create_task(client.exists("/r/child-t", timeout=30)),
                                   asyncio.create_task(client.batch([GetOp("/r")])))
    await eventually(lambda: agent.gate.reads_held_total == 4, within=30, what="the four reads held at the gate")
    assert not any(r.done() for r in (get, children, exists, many))
    await agent.gate.open(towards=target)
    got = await get
    assert got is not None and got[0] == b"target"
    assert await children == ["child-t"] and await exists is True
    first = (await many)[0]
    assert isinstance(first, tuple) and first[0] == b"target"
    # past the caller's deadline: HeldForMigration (UNAVAILABLE), nothing read
    await agent.gate.close()
    with pytest.raises(HeldForMigration, match="read held for migration"):
        await client.get("/r", timeout=1.0)
    assert agent.gate.reads_expired_total == 1
    await agent.gate.open()


async def test_reads_wait_while_the_lease_is_out(agent: Any, open_stores: Callable[..., Any]) -> None:
    """With the gate open but the fence saying no (the migration heartbeat lapsed: a coordinator
    may have gone on without this agent), a read waits until the fence holds again."""
    client: AgentClient = await open_stores(agent.address)
    await client.put("/leased", b"v", expected_version=-1)
    lease = [False]
    agent.gate.fence_with(lambda: lease[0], lambda: None)
    read = asyncio.create_task(client.get("/leased"))
    await asyncio.sleep(0.3)
    assert not read.done() and agent.gate.is_open
    lease[0] = True
    agent.gate.wake_readers()
    got = await read
    assert got is not None and got[0] == b"v"


async def test_held_write_past_its_deadline_fails_unavailable_and_writes_nothing(
    agent: Any, direct: Any, open_stores: Callable[..., Any]
) -> None:
    client: AgentClient = await open_stores(agent.address)
    await agent.gate.close()
    # the agent answers before the caller's deadline fires (so the caller learns why), not after
    with pytest.raises(HeldForMigration) as err:
        await client.put("/late", b"x", timeout=2.0)
    assert err.value.__class__ is HeldForMigration
    # the raw status: UNAVAILABLE with the machine-readable detail, not DEADLINE_EXCEEDED
    async with grpc.aio.insecure_channel(agent.address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await pb_grpc.MetadataStoreStub(channel).Delete(pb.DeleteRequest(path="/late"), timeout=2.0)
    assert raw.value.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(raw.value.trailing_metadata())
    assert trailers[wire.ERROR_KIND_KEY] == "HeldForMigration"
    assert pb.Error.FromString(trailers[wire.ERROR_DETAIL_KEY]).kind == pb.HELD_FOR_MIGRATION
    assert agent.gate.held == 0  # the expired ones left the line
    await agent.gate.open()
    assert not await direct.exists("/late")
    assert agent.metrics.held_write_expired._value.get() == 2


async def test_close_drains_writes_in_flight_and_counts_them(
    gateways: Gateways, zk_url: str, direct: Any, open_stores: Callable[..., Any]
) -> None:
    agent = await gateways.start(zk_url, source=SlowStore(direct, 0.3))
    client: AgentClient = await open_stores(agent.address)
    # five calls of their own (a deadline each: not coalesced into one Batch)
    in_flight = [asyncio.create_task(client.put(f"/drain{i}", b"x", timeout=30)) for i in range(5)]
    await _until(lambda: agent.gate.in_flight == 5)
    drained = await agent.gate.close()
    assert drained == 5
    # close returned after they were written
    assert all(await asyncio.gather(*(direct.exists(f"/drain{i}") for i in range(5))))
    await asyncio.gather(*in_flight)
    held = asyncio.create_task(client.put("/after-close", b"x"))
    await _until(lambda: agent.gate.held == 1)
    assert agent.metrics.drained_writes._value.get() == 5
    await agent.gate.open()
    await held
    assert await direct.exists("/after-close")


async def test_no_write_lost_or_applied_twice_across_gate_close_and_switch(
    agent: Any, direct: Any, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    """Workers, one session each, increment their own counter with compare-and-set, non-stop;
    meanwhile the gate closes, the data moves to a target (versions kept, as the copy does), the gate
    opens towards the target, closes and reopens again. Every acknowledged increment is in the
    final counter exactly once, and no write reached the source after the first close."""
    workers = 12
    clients: list[AgentClient] = [await open_stores(agent.address, timeout=30) for _ in range(workers)]
    target: Store = await open_stores(etcd_url)
    await direct.put("/counters", b"", expected_version=-1)
    for i in range(workers):
        await direct.put(f"/counters/w{i}", b"0", expected_version=-1)
    acked = [0] * workers
    errors: list[BaseException] = []
    stop = asyncio.Event()

    async def work(i: int) -> None:
        client = clients[i]
        path = f"/counters/w{i}"
        while not stop.is_set():
            try:
                got = await client.get(path)
                assert got is not None
                await client.put(path, str(int(got[0]) + 1).encode(), expected_version=got[1].version)
                acked[i] += 1
            except MetadataStoreError as e:  # any error is a failure of the promise
                errors.append(e)
                return

    tasks = [asyncio.create_task(work(i)) for i in range(workers)]

    async def progress(what: str) -> None:
        """Every worker acknowledges at least one more increment (through the agent's current store)."""
        base = list(acked)
        await eventually(lambda: bool(errors) or all(a > b for a, b in zip(acked, base, strict=True)),
                         within=60, what=what)
        assert errors == []

    await progress("every worker's first increments")  # the channels are warm before the close
    reads_before = agent.gate.reads_held_total
    await agent.gate.close()
    frozen = {i: await direct.get(f"/counters/w{i}") for i in range(workers)}
    # every worker comes to a stop at the gate, once: at its read or at its write (held in line)
    def blocked() -> int:
        return agent.gate.held + agent.gate.reads_held_total - reads_before

    await eventually(lambda: blocked() == workers or bool(errors), within=30, what="every worker held at the gate")
    assert errors == [] and blocked() == workers
    # the copy: every node with its value and version
    await target.put("/counters", b"")
    for i, got in frozen.items():
        assert got is not None
        await target.restore(f"/counters/w{i}", got[0], got[1].version)
    await agent.gate.open(towards=target)
    await progress("increments on the target")
    await agent.gate.close()  # a second hold, on the target this time
    await asyncio.sleep(0.1)
    await agent.gate.open()
    await progress("increments after the second hold")
    stop.set()
    await asyncio.gather(*tasks)

    assert errors == []
    for i in range(workers):
        got = await target.get(f"/counters/w{i}")
        assert got is not None
        assert int(got[0]) == acked[i], f"worker {i}: {got[0]!r} != {acked[i]} acknowledged"
        assert await direct.get(f"/counters/w{i}") == frozen[i]  # nothing reached the source after the close


async def test_gate_unit_hold_release_and_expiry() -> None:
    """The gate alone: FIFO release, deadline expiry, failure at shutdown."""
    from metashift.agent.core.gate import WriteGate
    from metashift.agent.core.router import Router

    class Dummy:
        url = "dummy"

    router = Router(Dummy())  # type: ignore[arg-type]
    gate = WriteGate(router, hold_timeout=5)
    order: list[int] = []

    async def write(i: int, wait: float | None = None) -> None:
        async with gate.write(wait):
            order.append(i)
            await asyncio.sleep(0.001)

    await gate.close()
    tasks = []
    for i in range(10):
        tasks.append(asyncio.create_task(write(i)))
        await _until(_held_is(gate, i + 1))
    with pytest.raises(HeldForMigration):
        await write(99, wait=0.05)
    assert gate.held == 10
    assert await gate.open() == 10
    await asyncio.gather(*tasks)
    assert order == list(range(10))
    await gate.close()
    doomed = asyncio.create_task(write(100))
    await _until(lambda: gate.held == 1)
    assert gate.fail_held() == 1
    with pytest.raises(HeldForMigration):
        await doomed
    # a caller cancelled while held leaves the line
    cancelled = asyncio.create_task(write(101))
    await _until(lambda: gate.held == 1)
    cancelled.cancel()
    await _until(lambda: gate.held == 0)
    assert await gate.open() == 0



async def test_a_released_write_that_has_not_resumed_yet_is_drained_by_a_close(
    agent: Any, direct: Any, open_stores: Callable[..., Any]
) -> None:
    """The gate opens and hands a held write its turn; the gate closes again before that write's
    coroutine has run. The write must count as in flight: ``close`` drains it (returns after it is
    written), so nothing reaches the store once ``close`` has returned."""
    client: AgentClient = await open_stores(agent.address)
    await client.put("/slip", b"before", expected_version=-1)
    await agent.gate.close()
    held = asyncio.create_task(client.put("/slip", b"held"))
    await _until(_held_is(agent.gate, 1))
    opener = asyncio.create_task(agent.gate.open())
    for _ in range(10_000):  # the release hands out the turn in one step; catch the very next one
        if not agent.gate._held:
            break
        await asyncio.sleep(0)
    drained = await agent.gate.close()
    at_close = await direct.get("/slip")
    await asyncio.wait([held], timeout=5)
    after = await direct.get("/slip")
    assert after == at_close, "a write reached the store after close() returned"
    assert drained == 1
    await opener
    await agent.gate.open()
    assert (await held).version == 1


class _SentStore(SlowStore):
    """A store whose put, once called, is on its way: it lands ``delay`` seconds later even if the
    caller stops waiting (a request already written to the server's socket)."""

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        async def send() -> Stat:
            await asyncio.sleep(self.delay)
            return await self.inner.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)

        return await asyncio.shield(asyncio.ensure_future(send()))


async def test_a_write_whose_caller_gave_up_is_still_drained_by_close(
    gateways: Gateways, zk_url: str, direct: Any, open_stores: Callable[..., Any]
) -> None:
    """The client's deadline passes while its write is in the store: the client hears
    StoreUnavailable, but the write is still on its way. ``close`` must wait for it (and count it),
    or it lands in the store after the gate closed."""
    from metashift import StoreUnavailable

    agent = await gateways.start(zk_url, source=_SentStore(direct, 1.0))
    client: AgentClient = await open_stores(agent.address)
    with pytest.raises(StoreUnavailable):
        await client.put("/gave-up", b"x", timeout=0.3)
    drained = await agent.gate.close()
    at_close = await direct.exists("/gave-up")
    await asyncio.sleep(1.5)  # let a write that escaped the drain land
    assert await direct.exists("/gave-up") == at_close, "a write reached the store after close() returned"
    assert drained == 1 and at_close
    await agent.gate.open()


async def test_a_caller_deadline_longer_than_hold_timeout_is_honoured(
    gateways: Gateways, zk_url: str, direct: Any, open_stores: Callable[..., Any]
) -> None:
    """``gate.hold_timeout`` bounds a held write whose caller set no deadline; a caller that set
    one waits until its own deadline, and its write completes when the gate opens before that."""
    agent = await gateways.start(zk_url, {"gate.hold_timeout": 0.5})
    client: AgentClient = await open_stores(agent.address)
    await agent.gate.close()
    held = asyncio.create_task(client.put("/patient", b"x", timeout=30))
    await _until(_held_is(agent.gate, 1))
    await asyncio.sleep(1.5)  # well past hold_timeout, well before the caller's deadline
    await agent.gate.open()
    assert (await held).version == 0
    assert await direct.exists("/patient")


class _CountingStore(SlowStore):
    """Records how many puts were in the store at once."""

    def __init__(self, inner: MetadataStore, delay: float) -> None:
        super().__init__(inner, delay)
        self.now = 0
        self.most = 0

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            return await super()._put(path, value, expected_version, ephemeral, sequential)
        finally:
            self.now -= 1


async def test_opening_twice_still_releases_held_writes_one_after_another(
    gateways: Gateways, zk_url: str, direct: Any, open_stores: Callable[..., Any]
) -> None:
    """Two open() calls at once (the migration reacting twice) must not start two release loops
    that hand out held writes side by side: they are applied one after another, in arrival order."""
    store = _CountingStore(direct, 0.05)
    agent = await gateways.start(zk_url, source=store)
    client: AgentClient = await open_stores(agent.address)
    await agent.gate.close()
    tasks = await _held_in_order(client, agent, "/twice", 6)
    await asyncio.gather(agent.gate.open(), agent.gate.open())
    stats = await asyncio.gather(*tasks)
    assert store.most == 1, "held writes released side by side"
    assert [s.version for s in stats] == list(range(6))


async def test_the_gate_says_when_it_opens_even_with_nothing_held(agent: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The freeze's end is read from the agents' logs (the sandbox's ``freeze_ms``): a gate that
    reopens with no write held must say so too."""
    caplog.set_level("INFO", logger="metashift.agent.core.gate")
    await agent.gate.close()
    assert await agent.gate.open() == 0
    said = [r.getMessage() for r in caplog.records if r.name == "metashift.agent.core.gate"]
    assert any(m.startswith("write gate closed") for m in said), said
    assert any(m.startswith("write gate open towards source; released 0") for m in said), said
