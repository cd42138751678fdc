"""The agent's state file (``agent.core.handover``): what a predecessor wrote is read back whole,
a torn last line ends the journal there, a file of another boot or agent carries nothing, the
journal is compacted without losing a record, and nobody but the agent can read it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from metashift.agent.core import handover
from metashift.agent.core.handover import CarriedSession, HandedState, StateFile, boot_id
from metashift.stores import SessionHandle


def _written(directory: Path, node: str = "bookie-1") -> StateFile:
    journal = StateFile(directory, node)
    journal.open(HandedState(node, boot_id(), 0.0))
    journal.store("zk://127.0.0.1:2181/pulsar", SessionHandle("zk", id=0x1234, secret=b"p" * 16, timeout=30.0))
    journal.opened(CarriedSession("s-1", "zk:127.0.0.1", 30.0, 0x7001, b"q" * 16))
    journal.owned("s-1", "/ledgers/available/b1")
    journal.owned("s-1", "/ledgers/available/readonly/b1")
    journal.dropped("s-1", "/ledgers/available/readonly/b1")
    journal.opened(CarriedSession("s-2", "grpc", 10.0))
    journal.owned("s-2", "/loadbalance/leader")
    journal.ended("s-2", ["/loadbalance/leader"])
    journal.close()
    return journal


def test_what_a_predecessor_wrote_is_read_back(tmp_path: Path) -> None:
    journal = _written(tmp_path)
    assert stat.S_IMODE(journal.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(journal.beat_path.stat().st_mode) == 0o600
    state = StateFile(tmp_path, "bookie-1").load()
    assert state is not None
    assert state.stores["zk://127.0.0.1:2181/pulsar"] == SessionHandle("zk", id=0x1234, secret=b"p" * 16, timeout=30.0)
    assert list(state.sessions) == ["s-1"]
    carried = state.sessions["s-1"]
    assert (carried.zk_id, carried.zk_passwd, carried.timeout) == (0x7001, b"q" * 16, 30.0)
    assert carried.ephemerals == {"/ledgers/available/b1"}
    assert state.orphans == {"/loadbalance/leader"}
    assert state.age() >= 0


def test_a_torn_last_line_ends_the_journal_there(tmp_path: Path) -> None:
    journal = _written(tmp_path)
    with open(journal.path, "a") as f:
        f.write('{"t": "own", "sid": "s-1", "pa')  # the host lost power mid-write
    state = StateFile(tmp_path, "bookie-1").load()
    assert state is not None and state.sessions["s-1"].ephemerals == {"/ledgers/available/b1"}


def test_another_boot_or_agent_carries_nothing(tmp_path: Path) -> None:
    journal = _written(tmp_path)
    assert StateFile(tmp_path, "bookie-2").load() is None  # another agent's name: another file
    lines = journal.path.read_text().splitlines()
    header = json.loads(lines[0])
    other = StateFile(tmp_path / "copy", "bookie-1")
    other.directory.mkdir()
    other.path.write_text("\n".join([json.dumps({**header, "node_id": "broker-9"}), *lines[1:]]) + "\n")
    assert other.load() is None
    other.path.write_text("\n".join([json.dumps({**header, "boot_id": "another-boot"}), *lines[1:]]) + "\n")
    assert other.load() is None


def test_the_journal_is_compacted_without_losing_a_record(tmp_path: Path) -> None:
    journal = StateFile(tmp_path, "broker-1")
    journal.open(HandedState("broker-1", boot_id(), 0.0))
    journal.opened(CarriedSession("s-1", "zk", 30.0, 0x7001, b"q" * 16))
    for i in range(handover.COMPACT_AFTER + 50):  # a broker's bundles, owned and released
        journal.owned("s-1", f"/namespace/public/default/0x{i:08x}")
        if i % 2:
            journal.dropped("s-1", f"/namespace/public/default/0x{i:08x}")
    journal.close()
    lines = journal.path.read_text().splitlines()
    expected = {f"/namespace/public/default/0x{i:08x}" for i in range(0, handover.COMPACT_AFTER + 50, 2)}
    appended = 2 + (handover.COMPACT_AFTER + 50) * 3 // 2  # every line written, never compacted
    assert len(lines) <= 2 + len(expected) + handover.COMPACT_AFTER + 1 < appended  # rewritten meanwhile
    state = StateFile(tmp_path, "broker-1").load()
    assert state is not None
    assert state.sessions["s-1"].ephemerals == expected
    assert not (tmp_path / "broker-1.state.new").exists()


def test_the_store_served_from_is_kept_and_a_format_1_file_still_read(tmp_path: Path) -> None:
    journal = StateFile(tmp_path, "broker-1")
    journal.open(HandedState("broker-1", boot_id(), 0.0, serving="zk://127.0.0.1:2181/pulsar"))
    journal.serving("etcd://127.0.0.1:2379/pulsar")  # the switch
    journal.close()
    state = StateFile(tmp_path, "broker-1").load()
    assert state is not None and state.serving == "etcd://127.0.0.1:2379/pulsar"
    # a predecessor of format 1 (before ``serving``): read, its store served from unknown
    header, *rest = journal.path.read_text().splitlines()
    old = json.loads(header) | {"format": 1}
    journal.path.write_text("\n".join([json.dumps(old), *(line for line in rest if '"serving"' not in line)]) + "\n")
    state = StateFile(tmp_path, "broker-1").load()
    assert state is not None and state.serving is None
    # a format this agent does not know: nothing carried
    journal.path.write_text(json.dumps(old | {"format": 99}) + "\n")
    assert StateFile(tmp_path, "broker-1").load() is None
