"""kazoo through the agent's ZooKeeper port, in front of ZooKeeper and of etcd, with the same
assertions as against a real ZooKeeper (the ``zookeeper`` target runs them against one)."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest
from kazoo.exceptions import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.protocol.states import EventType, KazooState

from tests.zkfront import Kazoos

WAIT = 10.0


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(WAIT), f"no {what} within {WAIT}s"


async def test_crud_and_versions(kazoos: Kazoos) -> None:
    def body() -> None:
        k = kazoos.new()
        k.create("/t", b"")
        assert k.create("/t/a", b"one") == "/t/a"
        value, stat = k.get("/t/a")
        assert value == b"one" and stat.version == 0 and stat.dataLength == 3 and stat.ephemeralOwner == 0
        assert k.set("/t/a", b"two", version=0).version == 1
        with pytest.raises(BadVersionError):
            k.set("/t/a", b"three", version=0)
        with pytest.raises(NodeExistsError):
            k.create("/t/a", b"")
        with pytest.raises(NoNodeError):
            k.create("/t/missing/child", b"")
        with pytest.raises(NoNodeError):
            k.set("/t/missing", b"")
        assert k.exists("/t/missing") is None
        k.create("/t/a/kid", b"")
        assert k.get("/t/a")[1].numChildren == 1
        assert k.get_children("/t/a") == ["kid"]
        with pytest.raises(NotEmptyError):
            k.delete("/t/a")
        with pytest.raises(BadVersionError):
            k.delete("/t/a/kid", version=5)
        k.delete("/t/a/kid", version=0)
        k.delete("/t/a")
        assert k.exists("/t/a") is None
        with pytest.raises(NoNodeError):
            k.delete("/t/a")
        k.ensure_path("/t/deep/er/est")
        assert k.get_children("/t/deep/er") == ["est"]
        k.delete("/t/deep", recursive=True)
        assert k.get_children("/t") == []
        k.create("/t/big", b"x" * 500_000)
        assert k.get("/t/big")[0] == b"x" * 500_000

    await asyncio.to_thread(body)


async def test_sequential_names(kazoos: Kazoos) -> None:
    def body() -> None:
        k = kazoos.new()
        k.create("/q", b"")
        made = [k.create("/q/item-", b"%d" % i, sequence=True) for i in range(12)]
        suffixes = [p.rsplit("-", 1)[1] for p in made]
        assert all(len(s) == 10 and s.isdigit() for s in suffixes)
        assert [int(s) for s in suffixes] == sorted(int(s) for s in suffixes)
        assert len(set(suffixes)) == 12
        assert sorted(k.get_children("/q")) == sorted(p.rsplit("/", 1)[1] for p in made)
        e = k.create("/q/eph-", b"", sequence=True, ephemeral=True)
        assert int(e.rsplit("-", 1)[1]) > int(suffixes[-1])

    await asyncio.to_thread(body)


async def test_sequential_names_with_no_prefix(kazoos: Kazoos) -> None:
    """``create("/folder/", sequence=True)``: the name is the suffix alone (ZooKeeper checks the
    path with its suffix, so a path ending in '/' is fine for a sequential create)."""

    def body() -> None:
        k = kazoos.new()
        k.create("/folder", b"")
        first = k.create("/folder/", b"a", sequence=True)
        second = k.create("/folder/", b"b", sequence=True, ephemeral=True)
        for made in (first, second):
            assert re.fullmatch(r"/folder/\d{10}", made), made
        assert int(second[-10:]) > int(first[-10:])
        assert sorted(k.get_children("/folder")) == sorted([first[-10:], second[-10:]])
        assert k.get(first)[0] == b"a"

    await asyncio.to_thread(body)


async def test_ephemerals_end_with_their_session(kazoos: Kazoos) -> None:
    def body() -> None:
        owner, other = kazoos.new(), kazoos.new()
        owner.create("/e", b"")
        owner.create("/e/mine", b"v", ephemeral=True)
        stat = other.exists("/e/mine")
        assert stat is not None and stat.ephemeralOwner == owner.client_id[0]
        with pytest.raises(NoChildrenForEphemeralsError):
            other.create("/e/mine/child", b"")
        gone = threading.Event()
        other.exists("/e/mine", watch=lambda ev: gone.set() if ev.type == EventType.DELETED else None)
        owner.stop()
        _wait(gone, "deletion of the closed session's ephemeral")
        assert other.exists("/e/mine") is None

    await asyncio.to_thread(body)


async def test_session_reattach_keeps_ephemerals(kazoos: Kazoos) -> None:
    def body() -> None:
        first = kazoos.new()
        first.create("/r", b"")
        first.create("/r/eph", b"", ephemeral=True)
        session_id = first.client_id
        chroot = kazoos.hosts[kazoos.hosts.index("/"):] if "/" in kazoos.hosts else ""
        first.set_hosts("127.0.0.1:1" + chroot)  # its next reconnect goes nowhere: the session moves for good
        again = kazoos.new(client_id=session_id)
        assert again.client_id[0] == session_id[0]
        stat = again.exists("/r/eph")
        assert stat is not None and stat.ephemeralOwner == session_id[0]
        assert again.get_children("/r") == ["eph"]

    await asyncio.to_thread(body)


async def test_watches(kazoos: Kazoos) -> None:
    def body() -> None:
        k, writer = kazoos.new(), kazoos.new()
        k.create("/w", b"")
        seen: list[tuple[str, str]] = []
        got = {name: threading.Event() for name in ("created", "changed", "child", "deleted")}

        def on(name: str):
            def watch(ev: object) -> None:
                seen.append((name, ev.type))  # type: ignore[attr-defined]
                got[name].set()
            return watch

        assert k.exists("/w/n", watch=on("created")) is None
        writer.create("/w/n", b"1")
        _wait(got["created"], "NodeCreated")
        k.get("/w/n", watch=on("changed"))
        writer.set("/w/n", b"2")
        _wait(got["changed"], "NodeDataChanged")
        k.get_children("/w", watch=on("child"))
        writer.create("/w/m", b"")
        _wait(got["child"], "NodeChildrenChanged")
        k.get("/w/m", watch=on("deleted"))
        writer.delete("/w/m")
        _wait(got["deleted"], "NodeDeleted")
        assert seen == [("created", "CREATED"), ("changed", "CHANGED"), ("child", "CHILD"), ("deleted", "DELETED")]
        # one-shot: a second change does not fire the consumed watch again
        writer.set("/w/n", b"3")
        k.get("/w/n")  # a round trip after the change
        assert len(seen) == 4

    await asyncio.to_thread(body)


async def test_multi_is_all_or_nothing(kazoos: Kazoos) -> None:
    def body() -> None:
        k = kazoos.new()
        k.create("/m", b"")
        k.create("/m/a", b"0")
        t = k.transaction()
        t.create("/m/b", b"1")
        t.set_data("/m/a", b"1", version=0)
        t.check("/m/a", 1)
        t.delete("/m/b")
        results = t.commit()
        assert results[0] == "/m/b" and results[1].version == 1 and results[2] is True and results[3] is True
        t = k.transaction()
        t.create("/m/c", b"")
        t.set_data("/m/a", b"x", version=7)
        t.create("/m/d", b"")
        kinds = [type(r).__name__ for r in t.commit()]
        assert kinds == ["RolledBackError", "BadVersionError", "RuntimeInconsistency"]
        assert k.exists("/m/c") is None and k.exists("/m/d") is None and k.get("/m/a")[0] == b"1"

    await asyncio.to_thread(body)


async def test_lock_and_election_recipes(kazoos: Kazoos) -> None:
    def body() -> None:
        a, b = kazoos.new(), kazoos.new()
        lock_a, lock_b = a.Lock("/locks/l", "a"), b.Lock("/locks/l", "b")
        assert lock_a.acquire(timeout=WAIT)
        assert not lock_b.acquire(blocking=False)
        assert lock_b.contenders() == ["a"]
        got_b = threading.Event()

        def take_b() -> None:
            if lock_b.acquire(timeout=WAIT):
                got_b.set()

        t = threading.Thread(target=take_b)
        t.start()
        lock_a.release()
        _wait(got_b, "the lock passing to the waiting contender")
        t.join()
        lock_b.release()

        leader = threading.Event()
        election = a.Election("/election", "a")
        runner = threading.Thread(target=lambda: election.run(leader.set), daemon=True)
        runner.start()
        _wait(leader, "leadership")
        counter = b.Counter("/counter")
        counter += 5
        counter -= 2
        assert counter.value == 3

    await asyncio.to_thread(body)


async def test_session_stays_connected(kazoos: Kazoos) -> None:
    def body() -> None:
        states: list[str] = []
        k = kazoos.new()
        k.add_listener(lambda s: states.append(s))
        k.create("/s", b"")
        for i in range(50):
            k.set("/s", b"%d" % i)
        assert KazooState.LOST not in states and k.connected

    await asyncio.to_thread(body)
