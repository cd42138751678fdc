"""``metashift sandbox --pulsar --target oxia --json`` as an operator runs it (issue 32: Oxia, the
store Pulsar is moving to): the stock Pulsar 4.0.7 that ``make setup`` fetched (a bookie and two
brokers, each beside its own ``metashift agent --zk-listen``), producers and consumers on
persistent and partitioned topics in two namespaces, namespace policies updated and topics created
and deleted all along. One cluster (a Pulsar cluster costs minutes of two cores to start) goes
through: ``metashift migrate abort`` mid-way (FAILED, Pulsar carries on on ZooKeeper, the Oxia
target emptied), a second ``metashift migrate start --wait`` to COMPLETED, ``pulsar-admin`` against
the migrated cluster, and the bookie and brokers restarted on Pulsar's own ``oxia://`` URLs with no
agent. Also: Ctrl-C leaves no process and no directory behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from metashift_lab.pulsar_cluster import PulsarNotInstalled, find_release
from tests.harness import require_part
from tests.procs import cmdline, descendants, starttime

pytestmark = pytest.mark.timeout(1800)

SANDBOX = [sys.executable, "-m", "metashift.cli", "sandbox", "--pulsar"]
#: The fields of `metashift sandbox --json` (tests/test_sandbox.py), and those --pulsar adds.
SANDBOX_FIELDS = {
    "phase", "reason", "epoch", "coordinator", "ok", "verified", "coordinator_verified", "tree_verified",
    "tree_check", "topics", "brokers", "bookies", "clients", "nodes", "copied_nodes", "phases",
    "writes_acknowledged", "writes_lost", "lost", "writes_failed", "failures", "ephemerals", "ephemerals_carried",
    "ephemerals_missing", "write_hold_ms", "write_ms", "freeze_ms", "passes", "pass_timings", "lives_on",
    "killed_agent", "seconds", "replicas",
}  # fmt: skip
PULSAR_FIELDS = {
    "pulsar_version", "messages_published", "messages_acknowledged", "messages_received", "messages_lost",
    "messages_duplicated", "ledger_ids_reused", "max_publish_latency_ms", "native_restart",
}  # fmt: skip


@pytest.fixture(scope="module")
def release_version() -> str:
    try:
        return find_release().version
    except PulsarNotInstalled as e:
        require_part(str(e))


def test_sandbox_pulsar_aborts_then_migrates_a_real_cluster_under_traffic(release_version: str) -> None:
    proc = subprocess.run([*SANDBOX, "--target", "oxia", "--abort-first", "--json"], capture_output=True, text=True,
                          timeout=1700)
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON on stdout (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}")
    stderr = proc.stderr
    fields = SANDBOX_FIELDS | PULSAR_FIELDS
    assert set(report) == fields, set(report) ^ fields
    assert report["phase"] == "COMPLETED", (report, stderr[-4000:])
    assert report["pulsar_version"] == release_version
    # the first migration was aborted while it copied: FAILED, the target emptied, a policy written
    # to ZooKeeper and messages acknowledged after it (else a failure below); the second completed
    assert report["epoch"] == 2, report
    assert "abort: migrate abort in SYNCING -> FAILED (aborted); target emptied" in stderr, stderr[-4000:]
    # every publish the brokers acknowledged came out of its subscription (at least once)
    assert report["messages_acknowledged"] > 500, report
    assert report["messages_acknowledged"] == report["messages_published"], report
    assert report["messages_received"] == report["messages_acknowledged"], report
    assert report["messages_lost"] == 0, report
    assert report["messages_duplicated"] >= 0
    assert report["ledger_ids_reused"] == 0, stderr[-4000:]
    assert report["max_publish_latency_ms"] > 0
    # Pulsar on Oxia with no agent: the 9 topics (two persistent, two partitioned of three, the one
    # created during the migration) and every acknowledged message kept by the backlog subscription
    restart = {"store": "oxia", "ok": True, "topics": 9, "messages_read": report["messages_acknowledged"]}
    assert report["native_restart"] == restart, (report, stderr[-4000:])
    # no broker or bookie restarted, lost its session or logged a metadata error; every admin call and
    # every pulsar-admin command (lists, stats, retention set and read, a topic created: in Oxia) worked
    assert report["failures"] == [], report["failures"]
    assert re.search(r"pulsar-admin 4\.0\.\d+ against the migrated cluster: ok", stderr), stderr[-4000:]
    assert report["freeze_ms"] is not None and report["freeze_ms"] > 0
    assert report["ok"] is True and proc.returncode == 0, stderr[-4000:]
    # bundles owned by both brokers, ledgers rolled over on both sides of the switch
    owned = re.search(r"bundles owned: http://\S+ (\d+), http://\S+ (\d+)", stderr)
    assert owned and int(owned.group(1)) > 0 and int(owned.group(2)) > 0, stderr
    ids = re.search(r"before the freeze: (\d+) ids, \d+\.\.(\d+); after the switch: (\d+) ids, (\d+)\.\.", stderr)
    assert ids and int(ids.group(1)) > 10 and int(ids.group(3)) > 0, stderr
    assert int(ids.group(4)) > int(ids.group(2)), ids.group(0)


def test_sandbox_pulsar_interrupted_leaves_no_process_nor_directory(release_version: str) -> None:
    """Ctrl-C while the bookie JVM runs: every process stopped, the work directory removed."""
    proc = subprocess.Popen([*SANDBOX, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, str] = {}
    work_dir: Path | None = None
    bookie: int | None = None
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        # the sandbox says the bookie's pid once it started it; how long a loaded machine takes to
        # get there is bounded by the test's timeout, not measured here
        while bookie is None and (line := proc.stderr.readline()):
            lines.append(line)
            if m := re.search(r"work directory (\S+?);", line):
                work_dir = Path(m.group(1))
            if m := re.search(r"bookie-1 started \(pid (\d+)\)", line):
                bookie = int(m.group(1))
        assert bookie is not None, f"the sandbox ended (exit {proc.wait()}) before the bookie:\n" + "".join(lines)
        seen = descendants(proc.pid)
        # the JVM's launcher may still be in its exec (an empty /proc/<pid>/cmdline): look again, bounded
        deadline = time.monotonic() + 30
        while "bookkeeper.server.Main" not in cmdline(bookie) and Path(f"/proc/{bookie}").exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if "bookkeeper.server.Main" not in cmdline(bookie):
            proc.kill()
            _out, err = proc.communicate(timeout=60)
            raise AssertionError(f"pid {bookie} is not a running bookie ({cmdline(bookie)!r}):\n{''.join(lines)}{err}")
        assert bookie in seen, {p: cmdline(p) for p in seen}
        assert len([p for p in seen if "metashift.cli agent" in cmdline(p)]) == 3, {p: cmdline(p) for p in seen}
        assert work_dir is not None and work_dir.exists()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, "".join(lines) + err
    deadline = time.monotonic() + 30
    while (alive := {p for p, start in seen.items() if starttime(p) == start}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive, {pid: cmdline(pid) for pid in alive}
    assert not work_dir.exists()
