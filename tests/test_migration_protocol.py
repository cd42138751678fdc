"""The migration protocol's pieces on their own: the phase table (every pair), the flag's JSON
(pinned), fencing by compare-and-set, participant records, and the operator's commands' refusals."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import pytest

from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.flag import (
    FlagChanged,
    MalformedFlag,
    MigrationFlag,
    move,
    new_flag,
    read_flag,
    write_flag,
)
from metashift.migration.participants import ParticipantRecord, list_participants
from metashift.migration.phase import TRANSITIONS, IllegalTransition, Phase, check_transition
from metashift.stores import MetadataStore

LEGAL = {
    ("NOT_STARTED", "SYNCING"),
    ("SYNCING", "PREPARATION"), ("SYNCING", "FAILED"),
    ("PREPARATION", "COPYING"), ("PREPARATION", "FAILED"),
    ("COPYING", "COMPLETED"), ("COPYING", "FAILED"),
    ("FAILED", "SYNCING"),
}


@pytest.mark.parametrize("old", list(Phase))
@pytest.mark.parametrize("new", list(Phase))
def test_every_phase_pair_is_checked_against_the_table(old: Phase, new: Phase) -> None:
    if (old.value, new.value) in LEGAL:
        check_transition(old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"from {old.value} to {new.value}"):
            check_transition(old, new)
    assert ((old.value, new.value) in LEGAL) == (new in TRANSITIONS[old])


def test_flag_json_is_pinned() -> None:
    flag = MigrationFlag(Phase.PREPARATION, "etcd://127.0.0.1:2379", 3, coordinator="broker-1",
                         started_at=1700000000000, phase_since=1700000000500)
    assert flag.to_json() == (
        b'{"phase":"PREPARATION","targetUrl":"etcd://127.0.0.1:2379","epoch":3,"reason":null,'
        b'"coordinator":"broker-1","startedAt":1700000000000,"phaseSince":1700000000500,"targetCleaned":false}'
    )
    assert MigrationFlag.from_json(flag.to_json(), 7) == MigrationFlag(
        Phase.PREPARATION, "etcd://127.0.0.1:2379", 3, coordinator="broker-1",
        started_at=1700000000000, phase_since=1700000000500, version=7,
    )


def test_a_completed_flag_holds_writes_until_released() -> None:
    copying = MigrationFlag(Phase.COPYING, "etcd://h:1", 2, started_at=1, phase_since=2)
    held = copying.moved(Phase.COMPLETED, released=False)
    assert b'"released":false' in held.to_json()
    assert MigrationFlag.from_json(held.to_json()).released is False
    assert held.holds_writes and copying.holds_writes
    released = dataclasses.replace(held, released=True)
    assert b"released" not in released.to_json() and not released.holds_writes
    assert MigrationFlag.from_json(released.to_json()).released is True


def test_pulsars_own_two_field_flag_is_read() -> None:
    flag = MigrationFlag.from_json(b'{"phase":"PREPARATION","targetUrl":"oxia://host:6648"}')
    assert (flag.phase, flag.target_url, flag.epoch) == (Phase.PREPARATION, "oxia://host:6648", 0)


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"phase":"RUNNING","targetUrl":"etcd://h:1"}', b'{"phase":"COPYING"}',
    b'{"phase":"COPYING","targetUrl":"etcd://h:1","epoch":-1}', b'{"phase":"COPYING","targetUrl":"etcd://h:1","epoch":true}',
    b'{"phase":"FAILED","targetUrl":"etcd://h:1","reason":5}',
])
def test_a_malformed_flag_is_a_clear_error(body: bytes) -> None:
    with pytest.raises(MalformedFlag, match=paths.FLAG):
        MigrationFlag.from_json(body)


async def test_a_stale_leaders_phase_write_is_refused(zk_url: str, open_stores: Any) -> None:
    store: MetadataStore = await open_stores(zk_url)
    started = await write_flag(store, new_flag("etcd://127.0.0.1:1", None), -1)
    stale = await read_flag(store)
    assert stale is not None and stale.version == started.version
    # a new leader takes over: its fencing write moves the flag's version on
    await write_flag(store, MigrationFlag(**{**stale.__dict__, "coordinator": "new-leader"}), stale.version)
    with pytest.raises(FlagChanged):
        await move(store, stale, Phase.PREPARATION, coordinator="old-leader")
    now = await read_flag(store)
    assert now is not None and now.phase is Phase.SYNCING and now.coordinator == "new-leader"
    with pytest.raises(IllegalTransition):  # the table is checked before anything is sent
        await move(store, now, Phase.COMPLETED)


async def test_participant_records_round_trip(zk_url: str, open_stores: Any) -> None:
    store: MetadataStore = await open_stores(zk_url)
    record = ParticipantRecord("bookie-7", "bookie", "unix:/run/a.sock")
    stat = await store.put(paths.PARTICIPANT_PREFIX, record.to_json(), ephemeral=True, sequential=True)
    await store.put(paths.PARTICIPANT_PREFIX, b"garbage", ephemeral=True, sequential=True)
    assert stat.path.startswith(f"{paths.PARTICIPANTS}/id-")
    (found,) = await list_participants(store)
    assert (found.node_id, found.role, found.address, found.acknowledged, found.path) == (
        "bookie-7", "bookie", "unix:/run/a.sock", None, stat.path)
    assert json.loads(found.acknowledging(4).to_json())["acknowledged"] == 4


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metashift.cli", *args], capture_output=True, text=True, timeout=120)


async def test_start_refuses_with_no_agent_registered_and_writes_nothing(zk_url: str, etcd_url: str,
                                                                         open_stores: Any) -> None:
    store: MetadataStore = await open_stores(zk_url)
    done = _cli("migrate", "start", "--source", zk_url, "--target", etcd_url)
    assert done.returncode == 2, done.stderr
    assert "no agent is registered" in done.stderr
    assert await store.get(paths.FLAG) is None


async def test_start_refuses_a_target_that_is_not_empty(zk_url: str, etcd_url: str, open_stores: Any) -> None:
    source: MetadataStore = await open_stores(zk_url)
    target: MetadataStore = await open_stores(etcd_url)
    await source.put(paths.PARTICIPANT_PREFIX, ParticipantRecord("b", "broker", "x").to_json(),
                     ephemeral=True, sequential=True)
    await target.put("/admin/leftover", b"x")
    with pytest.raises(control.MigrationRefused, match="/admin"):
        await control.start(source, etcd_url)
    assert await source.get(paths.FLAG) is None


async def test_commands_refuse_what_the_phase_does_not_allow(zk_url: str, etcd_url: str, open_stores: Any) -> None:
    source: MetadataStore = await open_stores(zk_url)
    done = _cli("migrate", "abort", "--source", zk_url)
    assert done.returncode == 2 and "no migration has been started" in done.stderr
    await source.put(paths.PARTICIPANT_PREFIX, ParticipantRecord("b", "broker", "x").to_json(),
                     ephemeral=True, sequential=True)
    flag = await control.start(source, etcd_url)
    done = _cli("migrate", "start", "--source", zk_url, "--target", etcd_url)
    assert done.returncode == 2 and "already in progress (phase SYNCING)" in done.stderr, done.stderr
    status = json.loads(_cli("migrate", "status", "--source", zk_url, "--json").stdout)
    assert {k: status[k] for k in ("phase", "target", "epoch", "reason", "copy")} == {
        "phase": "SYNCING", "target": etcd_url, "epoch": 1, "reason": None, "copy": None}
    assert [(p["node_id"], p["role"], p["acknowledged"]) for p in status["participants"]] == [("b", "broker", False)]
    assert "coordinator" in status and status["elapsed_s"] >= 0
    done = _cli("migrate", "abort", "--source", zk_url)
    assert done.returncode == 0, done.stderr
    now = await read_flag(source)
    assert now is not None and (now.phase, now.reason, now.epoch) == (Phase.FAILED, "aborted", flag.epoch)
    done = _cli("migrate", "abort", "--source", zk_url)
    assert done.returncode == 2 and "already failed" in done.stderr
    # COMPLETED is final: abort and start are refused
    await write_flag(source, MigrationFlag(Phase.COMPLETED, etcd_url, 1), now.version)
    done = _cli("migrate", "abort", "--source", zk_url)
    assert done.returncode == 2 and "abort is only possible before COMPLETED" in done.stderr
    done = _cli("migrate", "start", "--source", zk_url, "--target", etcd_url)
    assert done.returncode == 2 and "already completed" in done.stderr


async def test_a_malformed_flag_is_reported_not_acted_on(zk_url: str, open_stores: Any) -> None:
    source: MetadataStore = await open_stores(zk_url)
    await source.put(paths.FLAG, b"{oops")
    done = _cli("migrate", "status", "--source", zk_url)
    assert done.returncode == 2 and "malformed migration flag" in done.stderr and "Traceback" not in done.stderr
