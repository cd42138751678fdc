"""Pipelined writes through the ZooKeeper front, cross-checked against a real ZooKeeper.

A session's requests apply in the order sent, however many are in flight: bursts of creates,
setData and deletes (with versions, ephemerals, parents created and deleted within a burst, and
reads between them) are sent without waiting, to a real ZooKeeper and through the agent's front;
every answer of the front must be ZooKeeper's. In front of etcd the front carries a session's
consecutive writes in one txn (``handlers/runs.py``); these bursts are what makes such runs, and
their cuts and failed rounds."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from tests.harness import Gateways
from tests.zkfront import ensure_chroot

POOL = ["/p/a", "/p/b", "/p/c", "/p/a/x", "/p/a/y", "/p/b/z", "/p/a/x/w"]
BURSTS = 60


def _generate(seed: int) -> list[list[tuple[str, str, Any]]]:
    rnd = random.Random(seed)
    bursts = []
    for _ in range(BURSTS):
        burst: list[tuple[str, str, Any]] = []
        for _ in range(rnd.randint(2, 50)):
            op = rnd.choice(["create", "create", "set", "set", "delete", "get"])
            path = rnd.choice(POOL)
            if op == "create":
                burst.append((op, path, (rnd.randbytes(rnd.randint(0, 30)), rnd.random() < 0.15)))
            elif op == "set":
                burst.append((op, path, (rnd.randbytes(rnd.randint(0, 30)), rnd.choice([-1, -1, 0, 1, 2]))))
            elif op == "delete":
                burst.append((op, path, rnd.choice([-1, -1, 0, 1])))
            else:
                burst.append((op, path, None))
        bursts.append(burst)
    # and bursts of writes that do not depend on each other: long runs, none cut
    for b in range(4):
        bursts.append([("create", f"/p/n{b}-{i}", (b"v", False)) for i in range(40)])
        bursts.append([("set", f"/p/n{b}-{i}", (b"w", 0)) for i in range(40)])
    return bursts


def _send(k: KazooClient, op: str, path: str, arg: Any) -> Any:
    if op == "create":
        return k.create_async(path, arg[0], ephemeral=arg[1])
    if op == "set":
        return k.set_async(path, arg[0], version=arg[1])
    if op == "delete":
        return k.delete_async(path, version=arg)
    return k.get_async(path)


def _answer(op: str, result: Any) -> Any:
    try:
        value = result.get(timeout=30)
    except KazooException as e:
        return ("error", type(e).__name__)
    if op == "set":
        return ("ok", value.version, value.dataLength, value.numChildren, value.ephemeralOwner != 0)
    if op == "get":
        return ("ok", value[0], value[1].version, value[1].numChildren, value[1].ephemeralOwner != 0)
    return ("ok", value)


def _run(k: KazooClient, bursts: list[list[tuple[str, str, Any]]]) -> list[list[Any]]:
    k.create("/p", b"")
    answers = []
    for burst in bursts:
        sent = [(op, _send(k, op, path, arg)) for op, path, arg in burst]
        answers.append([_answer(op, result) for op, result in sent])
    return answers


@pytest.mark.parametrize("behind", ["zk", "etcd", "oxia"])
async def test_pipelined_writes_answer_as_zookeeper_does(
    behind: str, request: pytest.FixtureRequest, gateways: Gateways, zk_server: Any, namespace: str
) -> None:
    ensure_chroot(zk_server, namespace + "-ref")
    url = str(request.getfixturevalue(f"{behind}_url"))
    agent = await gateways.start(url, {"zookeeper.listen": "127.0.0.1:0"})
    bursts = _generate(seed=21)

    def body() -> tuple[list[list[Any]], list[list[Any]]]:
        ref = KazooClient(hosts=f"127.0.0.1:{zk_server.port}{namespace}-ref", timeout=10)
        front = KazooClient(hosts=agent.zookeeper.address, timeout=10)
        ref.start(timeout=15)
        front.start(timeout=15)
        try:
            return _run(ref, bursts), _run(front, bursts)
        finally:
            for k in (ref, front):
                k.stop()
                k.close()

    want, got = await asyncio.to_thread(body)
    differences = [
        f"burst {b} request {i} {bursts[b][i]!r}: zookeeper {w!r}, agent {g!r}"
        for b, (ws, gs) in enumerate(zip(want, got, strict=True))
        for i, (w, g) in enumerate(zip(ws, gs, strict=True)) if w != g
    ]
    assert differences == []
    outcomes = {a[1] if a[0] == "error" else "ok" for burst in want for a in burst}
    assert {"ok", "NoNodeError", "NodeExistsError", "BadVersionError", "NotEmptyError"} <= outcomes, outcomes
    if behind == "etcd":  # writes went to etcd in runs, not only one at a time (how many: timing)
        assert agent.zookeeper.handlers.writes_in_runs > 0
