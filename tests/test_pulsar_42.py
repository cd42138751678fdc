"""Pulsar 4.2, the line with PIP-454's own migration inside (issue 33): ``metashift sandbox
--pulsar --pulsar-version 4.2.4 --target etcd --json``. Its brokers and bookie wrap their ``zk:``
store in a ``DualMetadataStore`` that reads PIP-454's flag and acts on it; behind the agents they
migrate zk -> etcd on metashift under traffic with nothing lost while that code registers and
never takes a step: PIP-454's own status says NOT_STARTED with metashift's account during and after
the migration, and a ``metadata-migration start`` into an Oxia is refused. Then the cluster
restarts on etcd's own URLs with no agent and reads every message back."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from metashift_lab.pulsar_cluster import PulsarNotInstalled, find_release
from tests.harness import require_part

pytestmark = pytest.mark.timeout(1800)

FRONTED = "metashift fronts this cluster"


def test_a_pulsar_42_cluster_migrates_on_metashift_and_pip454_never_acts() -> None:
    try:
        release = find_release("4.2.4")
    except PulsarNotInstalled as e:
        require_part(str(e))
    assert release.ships_pip454
    command = [sys.executable, "-m", "metashift.cli", "sandbox", "--pulsar", "--pulsar-version", "4.2.4",
               "--target", "etcd", "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1700)
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON on stdout (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}")
    stderr = proc.stderr[-6000:]
    assert report["pulsar_version"] == "4.2.4"
    pip454 = report["pip454"]
    # a DualMetadataStore in each process (the bookie, both brokers; the cluster setup's too), each
    # registered through its agent, none took a step
    assert pip454["registered"] >= 3 and pip454["acted"] == [], pip454
    status = pip454["status"]
    for moment in ("during", "after"):
        assert status[moment]["phase"] == "NOT_STARTED", status
        assert FRONTED in status[moment]["targetUrl"], status
    assert "in SYNCING to etcd://" in status["during"]["targetUrl"], status
    assert "the cluster arrived here from zk://" in status["after"]["targetUrl"], status
    start = pip454["start"]
    assert start["http"] == 204 and start["refused"] is True, pip454
    assert status["after start"]["targetUrl"].startswith(
        f"pulsar-admin metadata-migration start --target {start['target']} was refused at "), status
    # the migration itself, as on the LTS line
    assert report["phase"] == "COMPLETED" and report["epoch"] == 1, (report, stderr)
    assert report["messages_acknowledged"] > 300, report
    assert report["messages_acknowledged"] == report["messages_published"] == report["messages_received"], report
    assert report["messages_lost"] == 0 and report["ledger_ids_reused"] == 0, (report, stderr)
    restart = {"ok": True, "topics": 9, "messages_read": report["messages_acknowledged"]}
    assert report["native_restart"] == {"store": "etcd", **restart}, (report, stderr)
    assert report["etcd_restart"] == restart
    assert report["failures"] == [], report["failures"]
    assert report["ok"] is True and proc.returncode == 0, stderr
