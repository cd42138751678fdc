"""The store layer on replicated stores (a ZooKeeper ensemble, an etcd cluster, an Oxia cluster of
three, shared by the test process: ``tests.replicated_stores``), opened on the URL naming every
member: the contract's tests (a selection of ``test_store_conformance``, each in its own
namespace), then a member SIGKILLed under a store that writes, listens and holds an ephemeral —
the member its calls go to, and the leader — and restarted.

What a member's loss must not change: the session (its id, its ephemeral and the ephemeral's
owner), the notifications (every change applied, once; ZooKeeper's persistent watches do not
replay what changed while a session had no connection, which the store says by ConnectionLost:
that is the one event allowed, and only there), the data (every acknowledged write read back with
its version). A write whose outcome is unknown is an error with ``write_may_have_happened``."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from metashift.stores import (
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
    Store,
    StoreUnavailable,
    open_store,
)
from metashift_lab.replicated import OxiaCluster, ReplicatedStore
from tests.harness import BACKENDS, bounded_teardown, eventually
from tests.replicated_stores import members_restored
from tests.test_store_conformance import (  # noqa: F401  (the contract's tests, run here again)
    test_batch_operations_on_one_path_apply_in_order,
    test_batch_results_are_independent,
    test_children_sorted_and_empty_when_missing,
    test_compare_and_set,
    test_create_get_and_missing,
    test_create_only_if_missing,
    test_delete,
    test_ephemerals_vanish_with_their_session,
    test_notifications,
    test_sequential_ephemeral,
    test_sequential_names_and_order,
)

CLUSTERS = {"zk": "zk_ensemble", "etcd": "etcd_cluster", "oxia": "oxia_cluster"}
#: Writes each writer gets acknowledged after the kill, and again after the restart.
AFTER_LOSS = 10
#: A bound (not a measure) on how long the writes take to flow again after a member's loss.
RECOVERY_LIMIT = 90.0


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each replicated store, directly."""
    return str(request.param)


def _url(cluster: ReplicatedStore, namespace: str) -> str:
    return cluster.url + namespace


@pytest.fixture
def zk_url(zk_ensemble: ReplicatedStore, namespace: str) -> str:
    return _url(zk_ensemble, namespace)


@pytest.fixture
def etcd_url(etcd_cluster: ReplicatedStore, namespace: str) -> str:
    return _url(etcd_cluster, namespace)


@pytest.fixture
def oxia_url(oxia_cluster: ReplicatedStore, namespace: str) -> str:
    return _url(oxia_cluster, namespace)


# ---- who serves a store: the member its calls go to ---------------------------------------------


def connected_member(store: Store, cluster: ReplicatedStore, kind: str, path: str) -> int:
    """The member ``store``'s calls about ``path`` go to: ZooKeeper's session's server, etcd's
    channel's member, Oxia's leader of the shard holding ``path``'s key."""
    if kind == "zk":
        port = store._session.conn.port  # type: ignore[attr-defined]
    elif kind == "etcd":
        port = store.url.hosts[store._conn.host_index][1]  # type: ignore[attr-defined]
    else:
        leader = store._conn.shard_for(store._keys.key(path)).leader  # type: ignore[attr-defined]
        port = int(leader.rsplit(":", 1)[1])
    return next(i for i, m in enumerate(cluster.members) if m.port == port)


def received_bytes(port: int) -> int:
    """Bytes waiting unread in the receive queues of the connections to loopback port ``port``
    (``/proc/net/tcp``): a stopped server's share of what its clients sent."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                total += int(queues.split(":")[1], 16)
    return total


# ---- a writer and what it was told ---------------------------------------------------------------


@dataclass
class Outcome:
    """What a writer was told of one node's two writes: its create, then a compare-and-set."""

    path: str
    created: str = "unsent"  # acked / unknown / refused
    modified: str = "unsent"


@dataclass
class Writer:
    """Creates ``prefix-NNNN`` then sets it at version 0, one node after another, until told to
    stop; remembers every answer and when the acknowledgements came."""

    store: Store
    prefix: str
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[MetadataStoreError] = field(default_factory=list)
    acked_at: list[tuple[float, float]] = field(default_factory=list)
    """(sent, acknowledged) of each write acknowledged, on the loop's monotonic clock."""

    @property
    def acks(self) -> int:
        return len(self.acked_at)

    async def _write(self, path: str, value: bytes, version: int) -> str:
        sent = time.monotonic()
        try:
            stat = await self.store.put(path, value, expected_version=version)
        except MetadataStoreError as e:
            self.errors.append(e)
            await asyncio.sleep(0.05)  # pacing the next attempt, not waiting for anything
            return "unknown" if e.write_may_have_happened else "refused"
        assert stat.version == version + 1 if version >= 0 else stat.version == 0, stat
        self.acked_at.append((sent, time.monotonic()))
        return "acked"

    async def run(self, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set() and n < 5000:
            outcome = Outcome(f"{self.prefix}-{n:04d}")
            self.outcomes.append(outcome)
            n += 1
            outcome.created = await self._write(outcome.path, b"created", -1)
            if outcome.created == "acked":
                outcome.modified = await self._write(outcome.path, b"modified", 0)

    def first_ack_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` until the first acknowledgement of a write sent after it."""
        return next((acked - moment for sent, acked in self.acked_at if sent > moment), None)


def allowed(outcome: Outcome) -> set[tuple[bytes, int] | None]:
    """What a node may hold after its writes were answered as ``outcome`` says."""
    if outcome.created in ("unsent", "refused"):
        return {None}
    if outcome.created == "unknown":
        return {None, (b"created", 0)}
    after: dict[str, set[tuple[bytes, int] | None]] = {
        "acked": {(b"modified", 1)}, "unknown": {(b"created", 0), (b"modified", 1)},
        "refused": {(b"created", 0)}, "unsent": {(b"created", 0)}}
    return after[outcome.modified]


def expected_notifications(path: str, held: tuple[bytes, int] | None) -> Counter[tuple[str, str]]:
    """The notifications of a node's writes, given what it holds in the end."""
    if held is None:
        return Counter()
    return Counter({("Created", path): 1, **({("Modified", path): held[1]} if held[1] else {})})


@pytest.fixture
async def stores() -> AsyncIterator[list[Store]]:
    opened: list[Store] = []
    yield opened
    for s in opened:
        await bounded_teardown(f"store {s.url}", s.close())


async def _two_stores(url: str, stores: list[Store]) -> tuple[Store, Store]:
    """Two stores opened on ``url`` (the one under test, and another to write beside it), closed
    at the test's end."""
    store = await open_store(url)
    stores.append(store)
    other = await open_store(url)
    stores.append(other)
    return store, other


async def _loss_under_writes(kind: str, victim: str, cluster: ReplicatedStore, namespace: str,
                             stores: list[Store]) -> None:  # fmt: skip
    """The scenario of the module doc; ``victim``: ``connected`` or ``leader``."""
    order: list[int] | None = None
    if kind in ("etcd", "oxia"):
        # the store's first host: a follower to lose alone, or the leader it talks to (etcd: its
        # channel fails over and the cluster elects; Oxia: the assignments' host)
        leader = await asyncio.to_thread(cluster.leader, namespace + "/eph")
        order = sorted(range(len(cluster.members)), key=lambda i: (i == leader) == (victim == "connected"))
    # a session timeout above what an election takes on a loaded machine (ZooKeeper's took 22 s
    # on 2 cores at a load of 44): the loss must not cost the session
    store, other = await _two_stores(cluster.url_in(order) + namespace + "?session_timeout=60", stores)
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    seen: list[Notification] = []
    store.add_listener(seen.append, under="/w")
    await store.put("/w", b"", expected_version=-1)
    await store.watch_ready()
    eph = await store.put("/eph", b"held", ephemeral=True)
    before = store.session_handle()
    assert before is not None
    writers = [Writer(store, "/w/own"), Writer(other, "/w/other")]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.run(stop)) for w in writers]
    try:
        with members_restored(cluster):
            await eventually(lambda: all(w.acks >= 5 for w in writers), within=60, what="writes before the loss")
            if victim == "connected" and kind == "oxia":  # the server the assignments stream from
                port = store.url.hosts[store._conn._host_index][1]  # type: ignore[attr-defined]
                index = next(i for i, m in enumerate(cluster.members) if m.port == port)
            elif victim == "connected":
                index = connected_member(store, cluster, kind, "/eph")
            else:
                index = await asyncio.to_thread(cluster.leader, namespace + "/eph")
            was_leader = index == await asyncio.to_thread(cluster.leader, namespace + "/eph")
            counts = [w.acks for w in writers]
            killed = time.monotonic()
            cluster.kill(index)
            elected = await asyncio.to_thread(cluster.wait_leader, namespace + "/eph",
                                              other_than=index if was_leader else None)
            election = time.monotonic() - killed
            try:
                await eventually(lambda: all(w.acks >= c + AFTER_LOSS for w, c in zip(writers, counts, strict=True)),
                                 within=RECOVERY_LIMIT, what="writes acknowledged again after the loss")
            except BaseException:
                for w in writers:  # what the writers were told meanwhile
                    print(f"{w.prefix}: {w.acks} acks; last errors {[str(e) for e in w.errors[-3:]]}")
                raise
            resumed = [w.first_ack_after(killed) for w in writers]
            cluster.restart(index)  # the main thread: a member dies with the thread that started it
            counts = [w.acks for w in writers]
            await eventually(lambda: all(w.acks >= c + 5 for w, c in zip(writers, counts, strict=True)),
                             within=RECOVERY_LIMIT, what="writes acknowledged after the restart")
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    print(f"\n{kind}: killed member {index} ({'leader' if was_leader else 'follower'}, {victim}); "
          f"leader {elected} within {election:.2f}s; next acks after "
          + ", ".join(f"{r:.2f}s" if r is not None else "-" for r in resumed)
          + f"; errors {sorted(Counter(f'{type(e).__name__}: {e}'[:90] for w in writers for e in w.errors).items())}"
          + f"; events {[e.value for e in events]}")

    # the session: no loss, its id and its ephemeral (with its owner) kept
    assert SessionEvent.SESSION_LOST not in events and SessionEvent.SESSION_REESTABLISHED not in events, events
    if kind == "zk":  # the connection moved: ConnectionLost, then Reconnected, and connected now
        assert not events or events[-1] is SessionEvent.RECONNECTED, events
    else:  # the store rode out the member's loss: its callers heard nothing
        assert events == [], events
    after = store.session_handle()
    assert after is not None and (after.id, after.shards) == (before.id, before.shards)
    got = await other.get("/eph")
    assert got is not None and got[0] == b"held" and got[1].ephemeral and got[1].owner == eph.owner, got

    # every error an outcome-unknown or a clean refusal, as its node shows; every ack read back
    for w in writers:  # the store unavailable (outcome unknown: retry after a read), or a clean refusal
        for e in w.errors:
            assert isinstance(e, StoreUnavailable) or not e.write_may_have_happened, repr(e)
    held: dict[str, tuple[bytes, int] | None] = {}
    for w in writers:
        for outcome in w.outcomes:
            node = await other.get(outcome.path)
            held[outcome.path] = None if node is None else (node[0], node[1].version)
            assert held[outcome.path] in allowed(outcome), (outcome, node)

    # the notifications: each change applied, once (ZooKeeper: what a connection's loss hid
    # excepted, which the ConnectionLost said)
    wanted: Counter[tuple[str, str]] = Counter()
    for path, holds in held.items():
        wanted += expected_notifications(path, holds)

    def heard() -> Counter[tuple[str, str]]:
        return Counter((n.type.value, n.path) for n in seen
                       if n.type is not NotificationType.CHILDREN_CHANGED and n.path != "/w")

    own_acked = Counter({k: v for k, v in wanted.items() if k[1].startswith("/w/own")
                         and next(o for o in writers[0].outcomes if o.path == k[1]).created == "acked"
                         and (k[0] == "Created" or next(o for o in writers[0].outcomes
                                                        if o.path == k[1]).modified == "acked")})
    must = own_acked if kind == "zk" and events else wanted
    await eventually(lambda: not (must - heard()), within=30, what=f"notifications {must - heard()}")
    for barrier in store.barrier_paths("/w/barrier"):  # every stream past the writes: repeats are in
        await other.put(barrier, b"b")
    await eventually(lambda: all(("Created", p) in heard() for p in store.barrier_paths("/w/barrier")), within=30,
                     what="the barrier's notifications")
    got_heard = heard() - Counter({("Created", p): 1 for p in store.barrier_paths("/w/barrier")})
    if kind == "zk" and events:
        assert not (got_heard - wanted), f"notified but not applied, or twice: {got_heard - wanted}"
    else:
        assert got_heard == wanted, f"missing {wanted - got_heard}, unexpected {got_heard - wanted}"


@pytest.mark.parametrize("victim", ["connected", "leader"])
@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_member_lost_under_a_store_that_writes_listens_and_holds_an_ephemeral(
    kind: str, victim: str, request: pytest.FixtureRequest, namespace: str, stores: list[Store]
) -> None:
    cluster = request.getfixturevalue(CLUSTERS[kind])
    await _loss_under_writes(kind, victim, cluster, namespace, stores)


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_write_in_flight_when_its_member_dies_is_outcome_unknown(
    kind: str, request: pytest.FixtureRequest, namespace: str, stores: list[Store]
) -> None:
    """The member a write went to is stopped with the write in its receive queue, then killed:
    the caller gets an error whose ``write_may_have_happened`` is True (etcd, Oxia: that member
    leads), unless the write had not left yet (the bytes seen were a heartbeat's) and the next
    member acknowledged it; the store serves again after, with the node as the outcome allows."""
    cluster = request.getfixturevalue(CLUSTERS[kind])
    order: list[int] | None = None
    if kind == "etcd":  # the store's channel on the leader
        leader = await asyncio.to_thread(cluster.leader)
        order = [leader] + [i for i in range(len(cluster.members)) if i != leader]
    url = cluster.url_in(order) + namespace
    store = await open_store(url)
    stores.append(store)
    await store.put("/inflight", b"before", expected_version=-1)
    with members_restored(cluster):
        index = connected_member(store, cluster, kind, "/inflight")
        member = cluster.members[index]
        waiting = received_bytes(member.port)
        member.pause()
        try:
            write = asyncio.create_task(store.put("/inflight", b"in flight", expected_version=0))
            await eventually(lambda: received_bytes(member.port) > waiting, within=30,
                             what="the write in the stopped member's receive queue")
        finally:
            cluster.kill(index)
        outcome: str
        try:
            await write
            # the bytes seen were another call's (a heartbeat): the write had not left, found its
            # member gone and went to the next leader (nothing had applied: ``never_sent``,
            # ``LeaderMoved``), which acknowledged it
            outcome = "acknowledged by the next member"
        except MetadataStoreError as e:
            assert e.write_may_have_happened, repr(e)
            outcome = repr(e)
        await asyncio.to_thread(cluster.wait_serving)

    async def read() -> Any:
        try:
            return await store.get("/inflight")
        except MetadataStoreError:
            return None

    await eventually(read, within=RECOVERY_LIMIT, what="the store serving again")
    got = await read()
    allowed = {(b"in flight", 1)} if outcome.startswith("acknowledged") else {(b"before", 0), (b"in flight", 1)}
    assert (got[0], got[1].version) in allowed, (outcome, got)
    print(f"\n{kind}: {outcome}; the node holds {got[0]!r}")


async def test_a_zookeeper_session_remembers_the_last_zxid_of_every_answer(
    zk_ensemble: ReplicatedStore, namespace: str, stores: list[Store]
) -> None:
    """A session that moves sends the last zxid it saw, so that a server behind it refuses it (it
    would answer from before the session's own writes): that zxid follows the forwarded requests
    of the agent's front too, not only the store's own calls and pings."""
    from metashift.stores.zookeeper.wire import CreateMode
    from metashift.stores.zookeeper.wire import Writer as Jute
    from metashift.stores.zookeeper.wire.constants import Op

    store = await open_store(_url(zk_ensemble, namespace))
    stores.append(store)
    stat = await store.put("/own", b"x", expected_version=-1)
    handle = store.session_handle()  # before the read below, whose answer moves it again
    position = await store.position_of("/own")
    assert handle is not None and position is not None and handle.last_zxid >= position, (handle, stat)
    answered: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    for i in range(3):
        answered = asyncio.get_running_loop().create_future()
        data = Jute().buffer(b"forwarded").bytes()
        sent = store.forward_create(Op.CREATE2, f"/forwarded-{i}", data, CreateMode.of(False, False),  # type: ignore[attr-defined]
                                    lambda err, body, f=answered: f.set_result(err))
        assert sent
        assert await asyncio.wait_for(answered, 30) == 0
    handle = store.session_handle()
    position = await store.position_of("/forwarded-2")
    assert handle is not None and position is not None
    assert handle.last_zxid >= position, f"last zxid {handle.last_zxid:#x} before the forwarded create's {position:#x}"


async def test_a_zookeeper_read_on_a_lagging_follower_sees_every_acknowledged_write(
    zk_ensemble: ReplicatedStore, namespace: str, stores: list[Store]
) -> None:
    """ZooKeeper serves a read from the session's own server, which may not have applied a write
    the leader acknowledged to another session yet. On an ensemble (the URL naming more than one
    host, or ``sync_reads=true``) the store sends a ``sync`` ahead of each turn's reads, so that a
    read reflects every write acknowledged before it was asked for: here the reader's server is
    stopped (SIGSTOP) while another session's write is acknowledged by the other two, the read
    is asked for, and the server is let go; the read must answer the acknowledged write."""
    cluster = zk_ensemble
    leader = await asyncio.to_thread(cluster.leader)
    follower = next(i for i in range(len(cluster.members)) if i != leader)
    writer = await open_store(cluster.url_in([leader]) + namespace)
    stores.append(writer)
    reader = await open_store(cluster.url_in([follower]) + namespace + "?sync_reads=true")
    stores.append(reader)
    for round_ in range(5):
        path = f"/lagging-{round_}"
        await writer.put(path, b"before", expected_version=-1)
        first = await reader.get(path)
        assert first is not None and first[0] == b"before", first
        cluster.members[follower].pause()
        try:
            stat = await writer.put(path, b"acknowledged")  # the leader and the other follower
            read = asyncio.create_task(reader.get(path))
            await asyncio.sleep(0.2)  # the read's request written to the stopped server's socket
        finally:
            cluster.members[follower].resume()
        got = await asyncio.wait_for(read, 60)
        assert got is not None and (got[0], got[1].version) == (b"acknowledged", stat.version), (round_, got)


async def test_an_etcd_failover_under_a_call_in_flight_and_a_live_watch(
    etcd_cluster: ReplicatedStore, namespace: str, stores: list[Store]
) -> None:
    """The store fails over (``failover``, as its lease loop does when a refresh fails) while a
    write waits on a stopped member and its watch stream is open: the write is outcome-unknown
    (or acknowledged by the next member, had it not left yet),
    never a ``CancelledError`` out of the caller's await (grpc.aio raised one for each call its
    channel's close ended, which ended the caller's task), and the watch opens again on the new
    member and goes on (its loop ended on the same CancelledError: no notification ever after)."""
    cluster = etcd_cluster
    leader = await asyncio.to_thread(cluster.leader)
    follower = next(i for i in range(len(cluster.members)) if i != leader)
    order = [follower] + [i for i in range(len(cluster.members)) if i != follower]
    store, other = await _two_stores(cluster.url_in(order) + namespace, stores)
    seen: list[Notification] = []
    store.add_listener(seen.append, under="/watched")
    await store.watch_ready()
    member = cluster.members[follower]
    waiting = received_bytes(member.port)
    member.pause()
    try:
        write = asyncio.create_task(store.put("/watched/in-flight", b"x"))
        await eventually(lambda: received_bytes(member.port) > waiting, within=30,
                         what="the write in the stopped member's receive queue")
        await store._conn.failover()  # type: ignore[attr-defined]
        try:
            await write
        except MetadataStoreError as e:
            assert e.write_may_have_happened, repr(e)
        else:
            # the bytes seen were another call's (the lease's refresh, a ping): the write had not
            # left, found its channel gone, and was sent to the next member (``never_sent``)
            assert await other.get("/watched/in-flight") is not None
    finally:
        member.resume()
    assert store.url.hosts[store._conn.host_index][1] != member.port  # type: ignore[attr-defined]
    await other.put("/watched/after", b"y", expected_version=-1)
    await eventually(lambda: any(n.path == "/watched/after" and n.type is NotificationType.CREATED for n in seen),
                     within=30, what="the watch's notification after the failover")


async def test_etcd_calls_go_on_to_the_next_member_when_theirs_is_gone(
    etcd_cluster: ReplicatedStore, namespace: str, stores: list[Store]
) -> None:
    """The member the store's channel is on is SIGKILLed: the first write after it is
    acknowledged or outcome-unknown (never a failure that says nothing was written), and every
    read and write after that goes on to the next member that answers instead of failing with
    the dead member's refusal (a member's loss is not the caller's error; a read changes nothing
    wherever it got, and a call refused before it was sent applied nowhere)."""
    cluster = etcd_cluster
    leader = await asyncio.to_thread(cluster.leader)
    order = [leader] + [i for i in range(len(cluster.members)) if i != leader]
    store = await open_store(cluster.url_in(order) + namespace + "?session_timeout=60")
    stores.append(store)
    await store.put("/gone", b"before", expected_version=-1)
    with members_restored(cluster):
        cluster.members[leader].kill()
        try:
            await store.put("/gone", b"first")
        except MetadataStoreError as e:
            assert e.write_may_have_happened, repr(e)
        for i in range(10):
            got = await store.get("/gone")
            assert got is not None, i
            stat = await store.put("/gone", b"%d" % i)
            again = await store.get("/gone")
            assert again is not None and (again[0], again[1].version) == (b"%d" % i, stat.version), (i, again, stat)
        assert store.url.hosts[store._conn.host_index][1] != cluster.members[leader].port  # type: ignore[attr-defined]


async def test_oxia_calls_wait_for_the_shards_next_leader(
    oxia_cluster: ReplicatedStore, namespace: str, stores: list[Store]
) -> None:
    """The leader of a key's shard is SIGKILLed: the first write after it is acknowledged or
    outcome-unknown, and the reads and writes after it wait for the shard's next leader (within
    the call timeout) instead of failing while the coordinator elects one ("no leader", "node is
    not leader", the dead leader's refusal are a pause, not the caller's error)."""
    cluster = oxia_cluster
    store = await open_store(cluster.url + namespace + "?session_timeout=60&timeout=30")
    stores.append(store)
    await store.put("/moved", b"before", expected_version=-1)
    with members_restored(cluster):
        lost = await asyncio.to_thread(cluster.kill_leader, namespace + "/moved")
        try:
            await store.put("/moved", b"first")
        except MetadataStoreError as e:
            assert e.write_may_have_happened, repr(e)
        for i in range(10):
            stat = await store.put("/moved", b"%d" % i)
            got = await store.get("/moved")
            assert got is not None and (got[0], got[1].version) == (b"%d" % i, stat.version), (i, got, stat)
        elected = await asyncio.to_thread(cluster.leader, namespace + "/moved")
        assert elected != lost, (lost, elected)


async def test_an_etcd_watch_moved_to_a_member_that_was_behind(
    etcd_cluster: ReplicatedStore, namespace: str, stores: list[Store]
) -> None:
    """A member stopped while 20 changes are written and heard on another member; the store then
    fails over to it (``failover`` moves to the next host of the URL): its watch opens there after
    the last revision it delivered, and hears the next 20 changes: each of the 40 once, none
    missed, none repeated. (The failover's read is linearizable: the member answers it once it
    caught up with the leader, so the watch never starts on a member still behind.)"""
    cluster = etcd_cluster
    leader = await asyncio.to_thread(cluster.leader)
    behind = next(i for i in range(len(cluster.members)) if i != leader)
    first = next(i for i in range(len(cluster.members)) if i != behind)
    order = [first, behind] + [i for i in range(len(cluster.members)) if i not in (first, behind)]
    store, other = await _two_stores(cluster.url_in(order) + namespace, stores)
    seen: list[Notification] = []
    store.add_listener(seen.append, under="/behind")
    await store.watch_ready()

    def heard() -> Counter[str]:
        return Counter(n.path for n in seen if n.type is NotificationType.CREATED)

    member = cluster.members[behind]
    member.pause()
    try:
        for i in range(20):
            await other.put(f"/behind/k{i:02d}", b"%d" % i, expected_version=-1)
        await eventually(lambda: len(heard()) == 20, within=30, what="the first 20 changes heard")
    finally:
        member.resume()
    await store._conn.failover()  # type: ignore[attr-defined]
    assert store.url.hosts[store._conn.host_index][1] == member.port  # type: ignore[attr-defined]
    for i in range(20, 40):
        await other.put(f"/behind/k{i:02d}", b"%d" % i, expected_version=-1)
    await other.put("/behind/last", b"", expected_version=-1)  # one stream: heard last, after any repeat
    await eventually(lambda: "/behind/last" in heard(), within=30, what="the changes after the failover")
    assert heard() == Counter({f"/behind/k{i:02d}": 1 for i in range(40)} | {"/behind/last": 1}), heard()


#: Members a test starts again while its event loop runs (the heartbeats go on meanwhile) are
#: started in this thread: a member dies with the thread that started it (``processes``'
#: PR_SET_PDEATHSIG), and this one lives as long as the test process, as the shared clusters do.
_MEMBERS_THREAD = ThreadPoolExecutor(1, thread_name_prefix="members")


def _restart_all(cluster: ReplicatedStore) -> None:
    for member in cluster.members:
        member.start()
    cluster.wait_serving()


async def test_an_oxia_cluster_restarted_inside_the_session_timeout_keeps_the_session(
    oxia_cluster: OxiaCluster, namespace: str, stores: list[Store]
) -> None:
    """Every data server SIGKILLed and started again while the store heartbeats: each shard's new
    leader loads its sessions from its log, answering "session not found" until it has. The store
    rides that out inside its session timeout: no SessionLost, an ephemeral on every shard still
    its own with its owner (chaos seed 23: a store that took that answer at its word made new
    sessions, and the server expired the old ones, with every member's registration, a timeout
    later)."""
    cluster = oxia_cluster
    store = await open_store(cluster.url + namespace + "?session_timeout=60&timeout=30")
    stores.append(store)
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    paths: dict[int, str] = {}
    for i in range(200):
        paths.setdefault(cluster.shard_of(f"{namespace}/eph-{i}"), f"/eph-{i}")
    assert len(paths) >= 3, paths
    made = {path: await store.put(path, b"held", ephemeral=True) for path in paths.values()}
    sessions = store._sessions  # type: ignore[attr-defined]
    with members_restored(cluster):
        for index in range(len(cluster.members)):
            cluster.kill(index)
        restarted = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(_MEMBERS_THREAD, _restart_all, cluster)
    # every session heartbeated through its shard's new leader (a bound, not a measure)
    await eventually(lambda: all(sessions._last_ok.get(shard, 0.0) > restarted for shard in paths), within=60,
                     what="a heartbeat answered on every shard after the restart")
    assert SessionEvent.SESSION_LOST not in events, events
    for path, stat in made.items():
        got = await store.get(path)
        assert got is not None and got[0] == b"held", path
        assert got[1].ephemeral and got[1].created_by_self and got[1].owner == stat.owner, (path, got)
