"""The migration's small promises (issue 17): an agent that cannot bind never registers, a target
that is the source is called so, the progress of a stopped pass makes sense, ``--clean-target``
and its refusals, epochs that keep growing across stores, the write gate's lease, and the warning
of a start into etcd (PIP-462)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from typing import Any

import pytest

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.router import Router
from metashift.cli.migrate import ETCD_REMOVED
from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.flag import MigrationFlag, read_flag, write_flag
from metashift.migration.origin import Origin
from metashift.migration.participants import ParticipantRecord
from metashift.migration.phase import Phase
from metashift.proto.errors import WriteOutcomeUnknown
from metashift.stores import MetadataStore, Notification, NotificationType
from tests.harness import eventually


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metashift.cli", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


async def _register(store: MetadataStore, node_id: str = "b") -> None:
    await store.put(paths.PARTICIPANT_PREFIX, ParticipantRecord(node_id, "broker", "x").to_json(),
                    ephemeral=True, sequential=True)


async def test_an_agent_whose_zk_listen_port_is_taken_never_registers(zk_url: str, open_stores: Any,
                                                                      tmp_path: Any) -> None:
    watcher: MetadataStore = await open_stores(zk_url)
    seen: list[str] = []
    synced = asyncio.Event()

    def on_change(n: Notification) -> None:
        if n.path.startswith(paths.PARTICIPANTS + "/") and n.type is NotificationType.CREATED:
            seen.append(n.path)
        if n.path == "/sync-point":
            synced.set()

    watcher.add_listener(on_change)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "metashift.cli", "agent", "--source", zk_url, "--node-id", "late",
            "--listen", f"unix:{tmp_path}/a.sock", "--zk-listen", f"127.0.0.1:{port}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2, err.decode()
    assert "zookeeper.listen" in err.decode() and "Traceback" not in err.decode()
    await watcher.put("/sync-point", b"")  # every notification before it has arrived once its own has
    await asyncio.wait_for(synced.wait(), 30)
    assert seen == [] and await watcher.get_children(paths.PARTICIPANTS) == []


async def test_a_target_that_is_the_source_is_called_so(zk_url: str, open_stores: Any) -> None:
    source: MetadataStore = await open_stores(zk_url)
    await _register(source)
    await source.put("/admin/x", b"x")
    same = zk_url.replace("127.0.0.1", "localhost")
    for target, why in ((zk_url, "the target is the source"), (same, "the target is the source"),
                        (zk_url + "/inner", "share nodes")):
        done = _cli("migrate", "start", "--source", zk_url, "--target", target)
        assert done.returncode == 2 and why in done.stderr, done.stderr
        assert "not empty" not in done.stderr
    assert await source.get(paths.FLAG) is None


async def test_a_start_into_etcd_warns_that_pulsar_5_removed_it_and_goes_on(
    zk_url: str, etcd_url: str, oxia_url: str, open_stores: Any
) -> None:
    """PIP-462: one warning line on stderr, and the migration starts all the same; none into Oxia."""
    for target, warned in ((etcd_url, True), (oxia_url, False)):
        source: MetadataStore = await open_stores(f"{zk_url}-{target.split(':')[0]}")
        await _register(source)
        done = _cli("migrate", "start", "--source", str(source.url.unredacted()), "--target", target)
        assert done.returncode == 0, done.stderr
        said = [line for line in done.stderr.splitlines() if "PIP-462" in line]
        assert said == ([f"metashift: warning: {ETCD_REMOVED}"] if warned else []), done.stderr
        assert "migration epoch 1 started" in done.stdout
        flag = await read_flag(source)
        assert flag is not None and flag.phase is Phase.SYNCING
    assert ETCD_REMOVED.startswith("Pulsar 5.0 removed the etcd metadata store (PIP-462)")


async def test_the_progress_of_a_pass_stopped_by_an_abort_makes_sense(zk_url: str, etcd_url: str,
                                                                      open_stores: Any) -> None:
    source: MetadataStore = await open_stores(zk_url)
    await write_flag(source, MigrationFlag(Phase.FAILED, etcd_url, 1, reason="aborted"), -1)
    # what a coordinator killed while pass 1 copied left: the copy does not count its nodes first
    progress = {"epoch": 1, "stage": "pass 1: copying", "done": 668, "total": 0, "verified": False,
                "passes": 1, "pending": 0}
    await source.put(paths.PROGRESS, json.dumps(progress).encode())
    text = _cli("migrate", "status", "--source", zk_url).stdout
    assert "of 0 nodes" not in text
    assert "pass 1: copying: 668 nodes (stopped: the migration failed)" in text, text
    body = json.loads(_cli("migrate", "status", "--source", zk_url, "--json").stdout)
    assert body["copy"]["total"] is None and body["copy"]["stopped"] is True and body["copy"]["done"] == 668


async def test_clean_target_removes_everything_but_a_flag_and_refuses_a_live_store(
    zk_url: str, etcd_url: str, open_stores: Any
) -> None:
    source: MetadataStore = await open_stores(zk_url)
    target: MetadataStore = await open_stores(etcd_url)
    await _register(source)
    # the store the cluster left, epoch 4: its tree, its flag (COMPLETED, to where it went)
    await target.put("/admin/policies/t", b"old")
    await write_flag(target, MigrationFlag(Phase.COMPLETED, zk_url, 4), -1)
    # a migration in progress from it: refused
    flag = await read_flag(target)
    assert flag is not None
    await write_flag(target, MigrationFlag(Phase.SYNCING, "zk://elsewhere:2181", 5), flag.version)
    done = _cli("migrate", "start", "--source", zk_url, "--target", etcd_url, "--clean-target", "--yes")
    assert done.returncode == 2 and "holds a migration in progress (phase SYNCING" in done.stderr, done.stderr
    flag = await read_flag(target)
    assert flag is not None
    await write_flag(target, MigrationFlag(Phase.COMPLETED, zk_url, 4), flag.version)
    # agents registered there: a cluster lives there
    await _register(target, "someone")
    done = _cli("migrate", "start", "--source", zk_url, "--target", etcd_url, "--clean-target", "--yes")
    assert done.returncode == 2 and "agents are registered in the target" in done.stderr, done.stderr
    assert await target.get("/admin/policies/t") is not None
    for name in await target.get_children(paths.PARTICIPANTS):
        await target.delete(f"{paths.PARTICIPANTS}/{name}")
    # the source came from there at epoch 4 (its origin): the new migration takes epoch 5
    await source.put(paths.ORIGIN, Origin(4, etcd_url).to_json())
    done = _cli("migrate", "start", "--source", zk_url, "--target", etcd_url, "--clean-target", "--yes")
    assert done.returncode == 0, done.stderr
    assert "migration epoch 5 started" in done.stdout
    assert await target.get("/admin/policies/t") is None and await target.get("/admin") is None
    kept = await read_flag(target)
    assert kept is not None and (kept.phase, kept.epoch) == (Phase.COMPLETED, 4)


async def test_a_completed_flag_the_cluster_came_back_from_is_history(zk_url: str, etcd_url: str,
                                                                      open_stores: Any) -> None:
    source: MetadataStore = await open_stores(zk_url)
    await _register(source)
    await write_flag(source, MigrationFlag(Phase.COMPLETED, etcd_url, 1), -1)
    done = _cli("migrate", "status", "--source", zk_url, "--json")
    body = json.loads(done.stdout)
    assert (body["phase"], body["lives_on"]) == ("COMPLETED", etcd_url)
    text = _cli("migrate", "status", "--source", zk_url).stdout
    assert f"lives on     {etcd_url}" in text
    # then the cluster came back (a later migration completed into this store)
    await source.put(paths.ORIGIN, Origin(2, etcd_url).to_json())
    body = json.loads(_cli("migrate", "status", "--source", zk_url, "--json").stdout)
    assert (body["phase"], body["epoch"], body["lives_on"]) == ("NOT_STARTED", 2, None), body
    flag = await control.start(source, etcd_url)
    assert (flag.phase, flag.epoch) == (Phase.SYNCING, 3)


async def test_the_write_gate_acknowledges_writes_only_under_its_lease(zk_url: str, open_stores: Any) -> None:
    store: MetadataStore = await open_stores(zk_url)
    gate = WriteGate(Router(store), hold_timeout=5.0)
    lease = {"ok": True}
    lapses: list[int] = []
    gate.fence_with(lambda: lease["ok"], lambda: lapses.append(1))
    await gate.run(lambda s: s.put("/leased", b"1"))
    # a write that ends after the lease ran out: its caller cannot be told it succeeded
    started = asyncio.Event()

    async def slow(s: MetadataStore) -> Any:
        started.set()
        await asyncio.sleep(0.2)
        return await s.put("/leased", b"2")

    running = asyncio.ensure_future(gate.run(slow))
    await started.wait()
    lease["ok"] = False
    with pytest.raises(WriteOutcomeUnknown):
        await running
    assert lapses
    # while it is out, a new write waits (its owner closes the gate, and opens it once it may)
    held = asyncio.ensure_future(gate.run(lambda s: s.put("/leased", b"3")))
    await eventually(lambda: gate.held == 1 or held.done(), within=30, what="the write held at the gate")
    assert not held.done() and gate.held == 1
    await gate.close(1.0)
    lease["ok"] = True
    await gate.open()
    await asyncio.wait_for(held, 10)
    got = await store.get("/leased")
    assert got is not None and got[0] == b"3"


async def test_clean_target_waits_for_agents_leaving_a_store_the_cluster_just_left(
    zk_url: str, etcd_url: str, open_stores: Any
) -> None:
    """A way back started the moment the migration completed: the old source still lists agents
    that are moving home (each leaves once it has). ``--clean-target`` waits for them, instead of
    calling the store a live cluster's (seen in a chaos run: seed 723, "reverse")."""
    from metashift.migration.flag import now_ms

    source: MetadataStore = await open_stores(zk_url)
    target: MetadataStore = await open_stores(etcd_url)
    await _register(source)
    await target.put("/admin/policies/t", b"old")
    await write_flag(target, MigrationFlag(Phase.COMPLETED, zk_url, 4, phase_since=now_ms()), -1)
    leaving: MetadataStore = await open_stores(etcd_url)  # an agent's session there, not yet gone
    await _register(leaving, "broker-1")
    await source.put(paths.ORIGIN, Origin(4, etcd_url).to_json())

    async def leave_soon() -> None:
        await asyncio.sleep(1.0)
        for name in await leaving.get_children(paths.PARTICIPANTS):
            await leaving.delete(f"{paths.PARTICIPANTS}/{name}")

    left = asyncio.get_running_loop().create_task(leave_soon())
    flag = await control.start(source, etcd_url, clean_target=True)
    await left
    assert flag.epoch == 5 and flag.phase is Phase.SYNCING
    assert await target.get("/admin/policies/t") is None
