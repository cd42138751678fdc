"""The simulated store's faults, which the protocol simulator injects (its contract is the
conformance suite's, ``test_store_conformance[sim]``): a call refused writes nothing, a call whose
answer is lost was applied and says its outcome is unknown, a delayed call lands after the calls
made after it, an unreachable server refuses everything and its clients hear ConnectionLost then
Reconnected, an expired session takes its ephemerals and its store takes a new one
(SessionLost, SessionReestablished), a broken notification stream is ConnectionLost then
Reconnected with later changes heard again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from metashift.stores import InvalidStoreURL, Notification, NotificationType, SessionEvent, StoreUnavailable
from metashift.stores.simulated import CallFault, SimulatedServers, SimulatedStore, parse_url
from tests.harness import eventually


class Scripted:
    """A fault plan: the fault of each (kind, path), once each."""

    def __init__(self) -> None:
        self.planned: dict[tuple[str, str], CallFault] = {}

    def on_call(self, server: str, store: str, kind: str, path: str) -> CallFault:
        return self.planned.pop((kind, path), CallFault())


@pytest.fixture
def plan() -> Scripted:
    return Scripted()


@pytest.fixture
async def servers(plan: Scripted) -> AsyncIterator[SimulatedServers]:
    yield SimulatedServers(faults=plan)


async def _open(servers: SimulatedServers, session_timeout: float = 0.6) -> SimulatedStore:
    return await servers.open(f"sim://s/root?session_timeout={session_timeout:g}")


async def test_a_refused_call_writes_nothing_and_a_lost_answer_was_written(
    servers: SimulatedServers, plan: Scripted
) -> None:
    store = await _open(servers)
    try:
        plan.planned[("put", "/refused")] = CallFault(refuse=True)
        with pytest.raises(StoreUnavailable) as refused:
            await store.put("/refused", b"x")
        assert not refused.value.write_may_have_happened
        assert await store.get("/refused") is None
        plan.planned[("put", "/lost")] = CallFault(lose_answer=True)
        with pytest.raises(StoreUnavailable) as lost:
            await store.put("/lost", b"y")
        assert lost.value.write_may_have_happened
        got = await store.get("/lost")
        assert got is not None and got[0] == b"y" and got[1].version == 0
    finally:
        await store.close()


async def test_a_delayed_call_lands_after_the_calls_made_after_it(servers: SimulatedServers, plan: Scripted) -> None:
    store = await _open(servers)
    try:
        await store.put("/x", b"0", expected_version=-1)
        plan.planned[("put", "/x")] = CallFault(delay=0.2)
        slow = asyncio.ensure_future(store.put("/x", b"slow"))
        await asyncio.sleep(0)
        fast = await store.put("/x", b"fast")
        assert fast.version == 1 and not slow.done()
        assert (await slow).version == 2
        got = await store.get("/x")
        assert got is not None and got[0] == b"slow"
    finally:
        await store.close()


async def test_an_unreachable_server_refuses_and_its_clients_hear_it(servers: SimulatedServers) -> None:
    store = await _open(servers, session_timeout=3)
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    try:
        made = await store.put("/eph", b"e", ephemeral=True)
        servers.server("s").unreachable = True
        with pytest.raises(StoreUnavailable) as err:
            await store.get("/eph")
        assert not err.value.write_may_have_happened
        await eventually(lambda: SessionEvent.CONNECTION_LOST in events, within=10, what="ConnectionLost")
        servers.server("s").unreachable = False
        await eventually(lambda: SessionEvent.RECONNECTED in events, within=10, what="Reconnected")
        assert SessionEvent.SESSION_LOST not in events
        got = await store.get("/eph")
        assert got is not None and got[1].created_by_self and got[1].owner == made.owner
    finally:
        await store.close()


async def test_an_expired_session_takes_its_ephemerals_and_the_store_takes_a_new_one(
    servers: SimulatedServers,
) -> None:
    store, other = await _open(servers), await _open(servers)
    events: list[SessionEvent] = []
    heard: list[Notification] = []
    store.add_session_listener(events.append)
    other.add_listener(heard.append)
    try:
        await store.put("/reg", b"", expected_version=-1)
        made = await store.put("/reg/me", b"m", ephemeral=True)
        servers.server("s").expire(store.session)
        await eventually(lambda: SessionEvent.SESSION_REESTABLISHED in events, within=10,
                         what="SessionLost, then SessionReestablished")
        assert events[events.index(SessionEvent.SESSION_REESTABLISHED) - 1] is SessionEvent.SESSION_LOST
        assert await other.get("/reg/me") is None
        assert Notification(NotificationType.DELETED, "/reg/me") in heard
        again = await store.put("/reg/me", b"m", ephemeral=True)
        assert again.created_by_self and again.owner != made.owner
    finally:
        await store.close()
        await other.close()


async def test_a_session_silent_past_its_timeout_is_expired_when_the_server_is_back(
    servers: SimulatedServers,
) -> None:
    store = await _open(servers, session_timeout=0.3)
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    try:
        await store.put("/eph", b"e", ephemeral=True)
        servers.server("s").unreachable = True
        await asyncio.sleep(0.5)  # past the session's timeout with no heartbeat getting through
        servers.server("s").unreachable = False
        await eventually(lambda: SessionEvent.SESSION_REESTABLISHED in events, within=10, what="a new session")
        assert SessionEvent.SESSION_LOST in events
        assert await store.get("/eph") is None
    finally:
        await store.close()


async def test_a_broken_notification_stream_tells_its_listeners_to_read_again(servers: SimulatedServers) -> None:
    store, writer = await _open(servers), await _open(servers)
    events: list[SessionEvent] = []
    heard: list[Notification] = []
    store.add_session_listener(events.append)
    store.add_listener(heard.append)
    try:
        store.break_notifications()
        await writer.put("/during", b"x")  # written while the stream is down: may be missed
        await eventually(lambda: SessionEvent.RECONNECTED in events, within=10, what="Reconnected")
        assert events[:2] == [SessionEvent.CONNECTION_LOST, SessionEvent.RECONNECTED]
        await writer.put("/after", b"y")
        await eventually(lambda: Notification(NotificationType.CREATED, "/after") in heard, within=10,
                         what="a change after the stream came back")
    finally:
        await store.close()
        await writer.close()


@pytest.mark.parametrize("url", ["zk://s/root", "sim:///root", "sim://s/root?colour=blue"])
def test_a_bad_simulated_url_is_a_clear_error(url: str) -> None:
    with pytest.raises(InvalidStoreURL):
        parse_url(url)


async def test_several_streams_overtake_one_another_and_the_barrier_covers_each() -> None:
    """With several notification streams (Oxia's shards), a stream held back is overtaken by the
    others, each stays in write order, and the barrier's paths land one on each stream."""
    held: set[int] = set()

    class HoldOne:
        def on_call(self, server: str, store: str, kind: str, path: str) -> CallFault:
            stream = directory.server("s").stream_of("/root" + path)
            return CallFault(delay=0.3) if kind == "notify" and stream in held else CallFault()

    directory = SimulatedServers(faults=HoldOne(), streams=3)
    store = await directory.open("sim://s/root")
    heard: list[Notification] = []
    store.add_listener(heard.append)
    try:
        barrier = store.barrier_paths("/b")
        assert barrier[0] == "/b" and len(barrier) == 3
        assert {directory.server("s").stream_of("/root" + p) for p in barrier} == {0, 1, 2}
        assert not store.notifications_in_order
        held.add(directory.server("s").stream_of("/root/b"))
        for p in barrier:
            await store.put(p, b"1")
            await store.put(p, b"2")
        await eventually(lambda: sum(n.type is NotificationType.MODIFIED for n in heard) == 3, within=10,
                         what="every stream's notifications")
        order = [n.path for n in heard if n.type is not NotificationType.CHILDREN_CHANGED]
        assert order.index(barrier[1]) < order.index("/b")  # the held stream was overtaken
        for p in barrier:  # each stream in write order
            kinds = [n.type for n in heard if n.path == p]
            assert kinds == [NotificationType.CREATED, NotificationType.MODIFIED], (p, kinds)
    finally:
        await store.close()
