"""Cross-check (zetcd's ``xchk`` idea): one generated sequence of operations runs against a real
ZooKeeper and, step by step, through the agent's ZooKeeper port (in front of ZooKeeper, of etcd
and of Oxia); every answer is compared: the error, or the value and the Stat fields a store keeps
(version, dataLength, numChildren, ephemeral or not; in front of ZooKeeper cversion and aversion
too), children, created paths. ``test_stat_is_zookeepers_own`` reads the same nodes through the
front and directly: in front of ZooKeeper every Stat field is ZooKeeper's own.

Sequential creates go under their own parent (``/x/seq``), whose own version is left out: on etcd
and Oxia its version is the sequence counter (Pulsar's layout), and the numbers themselves differ
there."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from tests.harness import Gateways
from tests.zkfront import ensure_chroot

POOL = ["/x/a", "/x/b", "/x/a/c", "/x/a/d", "/x/b/e", "/x/a/c/f", "/x/g"]
STEPS = 400


def _answer(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except KazooException as e:
        return ("error", type(e).__name__)


#: Compare ZooKeeper's own cversion and aversion too (in front of ZooKeeper the front answers with
#: ZooKeeper's Stat; in front of etcd cversion is the number of children).
FULL_STAT = False


def _stat(stat: Any) -> tuple[int, ...]:
    fields = (stat.version, stat.dataLength, stat.numChildren, stat.ephemeralOwner != 0)
    return (*fields, stat.cversion, stat.aversion) if FULL_STAT else fields


def _step(k: KazooClient, op: str, path: str, arg: Any) -> Any:
    if op == "create":
        return _answer(lambda: k.create(path, arg[0], ephemeral=arg[1]))
    if op == "seq":
        return _answer(lambda: k.create("/x/seq/s-", arg, sequence=True).rsplit("-", 1)[0])
    if op == "set":
        return _answer(lambda: _stat(k.set(path, arg[0], version=arg[1])))
    if op == "delete":
        return _answer(lambda: k.delete(path, version=arg))
    if op == "get":
        return _answer(lambda: (lambda r: (r[0], _stat(r[1])))(k.get(path)))
    if op == "exists":
        return _answer(lambda: (lambda s: None if s is None else _stat(s))(k.exists(path)))
    if op == "children":
        return _answer(lambda: sorted(k.get_children(path)))
    if op == "seqcount":
        return _answer(lambda: len(k.get_children("/x/seq")))
    if op == "multi":
        t = k.transaction()
        for sub, p, a in arg:
            if sub == "create":
                t.create(p, a)
            elif sub == "set":
                t.set_data(p, a[0], version=a[1])
            elif sub == "delete":
                t.delete(p, version=a)
            else:
                t.check(p, a)
        return _answer(lambda: [r if isinstance(r, str | bool) else type(r).__name__ if isinstance(r, Exception)
                                else _stat(r) for r in t.commit()])
    raise AssertionError(op)


def _generate(seed: int) -> list[tuple[str, str, Any]]:
    rnd = random.Random(seed)
    steps: list[tuple[str, str, Any]] = []
    for _ in range(STEPS):
        op = rnd.choice(["create", "create", "set", "delete", "get", "exists", "children", "seq", "seqcount", "multi"])
        path = rnd.choice(POOL)
        version = rnd.choice([-1, 0, 1, 2])
        if op == "create":
            steps.append((op, path, (rnd.randbytes(rnd.randint(0, 20)), rnd.random() < 0.2)))
        elif op == "set":
            steps.append((op, path, (rnd.randbytes(rnd.randint(0, 20)), version)))
        elif op == "delete":
            steps.append((op, path, version))
        elif op == "seq":
            steps.append((op, path, rnd.randbytes(3)))
        elif op == "multi":
            subs = []
            for _ in range(rnd.randint(1, 4)):
                sub = rnd.choice(["create", "set", "delete", "check"])
                p = rnd.choice(POOL)
                v = rnd.choice([-1, 0, 1])
                subs.append((sub, p, b"m" if sub == "create" else (b"n", v) if sub == "set" else max(v, 0)
                             if sub == "check" else v))
            steps.append((op, path, subs))
        else:
            steps.append((op, path, None))
    return steps


@pytest.mark.parametrize("behind", ["zk", "etcd", "oxia"])
async def test_cross_check_against_real_zookeeper(
    behind: str, request: pytest.FixtureRequest, gateways: Gateways, zk_server: Any, namespace: str
) -> None:
    ensure_chroot(zk_server, namespace + "-ref")
    url = str(request.getfixturevalue(f"{behind}_url"))
    agent = await gateways.start(url, {"zookeeper.listen": "127.0.0.1:0"})
    steps = _generate(seed={"zk": 12, "etcd": 13, "oxia": 14}[behind])
    global FULL_STAT
    FULL_STAT = behind == "zk"

    def body() -> tuple[list[str], set[str]]:
        ref = KazooClient(hosts=f"127.0.0.1:{zk_server.port}{namespace}-ref", timeout=10)
        front = KazooClient(hosts=agent.zookeeper.address, timeout=10)
        ref.start(timeout=15)
        front.start(timeout=15)
        try:
            for k in (ref, front):
                k.create("/x", b"")
                k.create("/x/seq", b"")
            differences = []
            seen: set[str] = set()
            for i, (op, path, arg) in enumerate(steps):
                want, got = _step(ref, op, path, arg), _step(front, op, path, arg)
                seen.add(f"{op}:{want[0]}" if want[0] == "ok" else want[1])
                if want != got:
                    differences.append(f"step {i} {op} {path} {arg!r}: zookeeper {want!r}, agent {got!r}")
            return differences, seen
        finally:
            for k in (ref, front):
                k.stop()
                k.close()

    differences, seen = await asyncio.to_thread(body)
    assert differences == []
    # the sequence exercised successes and ZooKeeper's errors alike
    assert {"create:ok", "set:ok", "delete:ok", "multi:ok", "NoNodeError", "NodeExistsError",
            "BadVersionError", "NotEmptyError"} <= seen, seen


def _fields(stat: Any) -> dict[str, int]:
    return {name: getattr(stat, name) for name in (
        "czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion", "ephemeralOwner", "dataLength",
        "numChildren", "pzxid")}


async def test_stat_is_zookeepers_own(gateways: Gateways, zk_server: Any, zk_url: str, namespace: str) -> None:
    """In front of ZooKeeper, every Stat a client gets (getData, exists, getChildren2, setData,
    create2, multi's setData) is the Stat ZooKeeper itself gives for the node, field by field;
    ephemeralOwner of the session's own ephemerals is its own session id."""
    agent = await gateways.start(zk_url, {"zookeeper.listen": "127.0.0.1:0"})

    def body() -> None:
        direct = KazooClient(hosts=f"127.0.0.1:{zk_server.port}{namespace}", timeout=10)
        front = KazooClient(hosts=agent.zookeeper.address, timeout=10)
        direct.start(timeout=15)
        front.start(timeout=15)
        try:
            front.create("/s", b"top")
            for i in range(3):
                front.create(f"/s/c{i}", b"x" * i)
            front.delete("/s/c1")
            set_stat = front.set("/s", b"again")
            _, created = front.create("/s/e", b"eph", ephemeral=True, include_data=True)
            t = front.transaction()
            t.set_data("/s/c0", b"multi")
            multi_stat = t.commit()[0]
            for path in ("/s", "/s/c0", "/s/c2", "/s/e"):
                want = _fields(direct.exists(path))
                if path == "/s/e":
                    assert want["ephemeralOwner"] != 0
                    want["ephemeralOwner"] = front.client_id[0]
                assert _fields(front.exists(path)) == want, path
                assert _fields(front.get(path)[1]) == want, path
                assert _fields(front.get_children(path, include_data=True)[1]) == want, path
            top = _fields(direct.exists("/s"))
            assert top["numChildren"] == 3 and top["cversion"] == 5  # three creates, a delete, the ephemeral
            assert top["pzxid"] > top["czxid"] and top["ctime"] > 0
            assert _fields(set_stat)["mzxid"] == top["mzxid"] and _fields(set_stat)["version"] == 1
            assert _fields(created) == {**_fields(direct.exists("/s/e")), "ephemeralOwner": front.client_id[0]}
            assert _fields(multi_stat) == _fields(direct.exists("/s/c0"))
        finally:
            for k in (direct, front):
                k.stop()
                k.close()

    await asyncio.to_thread(body)
