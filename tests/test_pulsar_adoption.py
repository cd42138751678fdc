"""The adoption path with a stock Pulsar (issue 31), on the path of etcd users to Pulsar 5.0 (issue
32): ``metashift sandbox --pulsar --source etcd --target oxia --forget broker-2 --json``. The
cluster (a bookie and two brokers of the release ``make setup`` fetched) starts on etcd directly
(Pulsar's own etcd URLs), with traffic; the bookie and broker-1 are restarted onto their agents'
ZooKeeper fronts one by one, ``migrate check`` before each step naming exactly the members still on
etcd; broker-2 is left there: the check names it, ``migrate start`` refuses and writes nothing,
``migrate start --force`` (broker-2 writing around the agents all along: admin calls land on it)
either fails before COMPLETED or completes and ``status`` on etcd names what broker-2 wrote there
after the switch. Then broker-2 goes behind its agent too and the check turns green; unless the
forced migration completed, the migration to Oxia completes under traffic with nothing lost; the
cluster restarts on Oxia's own URLs with no agent and reads every message back."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from metashift_lab.pulsar_cluster import PulsarNotInstalled, find_release
from metashift_lab.pulsar_cluster.adoption import FORCE_REASON
from tests.harness import require_part

pytestmark = pytest.mark.timeout(1800)

BYPASS = "is registered through a session no agent holds: restart it onto its agent's ZooKeeper front first"


def test_a_cluster_on_etcd_adopts_its_agents_and_a_forgotten_broker_is_never_split_off() -> None:
    try:
        version = find_release().version
    except PulsarNotInstalled as e:
        require_part(str(e))
    command = [sys.executable, "-m", "metashift.cli", "sandbox", "--pulsar", "--source", "etcd", "--target", "oxia",
               "--forget", "broker-2", "--json"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1700)
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON on stdout (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}")
    stderr = proc.stderr[-6000:]
    assert report["pulsar_version"] == version
    adoption = report["adoption"]
    steps = adoption["steps"]
    # the rolling restart: the bookie first, then the brokers; each check named exactly the members
    # still on etcd (broker-2, forgotten, last)
    assert [s["restarted"] for s in steps] == ["bookie-1", "broker-1", "broker-2"], steps
    kinds = [sorted(n.split()[0] for n in s["named_before"]) for s in steps]
    assert kinds == [["bookie", "broker", "broker"], ["broker", "broker"], ["broker"]], steps
    assert all(s["ready_before"] is False for s in steps), steps
    broker_2 = steps[2]["named_before"]
    assert set(broker_2) < set(steps[1]["named_before"]) < set(steps[0]["named_before"]), steps
    forgotten = adoption["forgotten"]
    assert forgotten["name"] == "broker-2"
    assert forgotten["check_exit"] == 1 and forgotten["check_named"] == broker_2, forgotten
    assert forgotten["start_exit"] == 2 and forgotten["nothing_written"] is True, forgotten
    assert any(f"{broker_2[0]} {BYPASS}" in line for line in forgotten["start_said"]), forgotten
    forced = forgotten["forced"]
    assert forced["forced"]["reason"] == FORCE_REASON, forced
    assert forgotten["forced_writes"] > 0, forgotten  # broker-2 wrote around the agents all along
    # never silently split off: FAILED before COMPLETED (a write in the freeze, or a write to its
    # registration), or COMPLETED with its writes into etcd named by status there
    if forced["phase"] == "COMPLETED":
        written = forced["writes_after_switch"]
        assert written["count"] > 0 and "/admin/policies/metashift/ns-forgotten" in written["paths"], forced
        epoch = 1  # the cluster moved with the forced migration: no second one
    else:
        assert forced["phase"] == "FAILED" and forced["reason"], forced
        epoch = 2
    assert adoption["ready_after"] is True and adoption["ok"] is True, adoption
    # then every member behind its agent: the migration completed
    assert report["phase"] == "COMPLETED" and report["epoch"] == epoch, (report, stderr)
    assert report["messages_acknowledged"] > 300, report
    assert report["messages_acknowledged"] == report["messages_published"] == report["messages_received"], report
    assert report["messages_lost"] == 0 and report["ledger_ids_reused"] == 0, (report, stderr)
    restart = {"ok": True, "topics": 9, "messages_read": report["messages_acknowledged"]}
    assert report["native_restart"] == {"store": "oxia", **restart}, (report, stderr)
    assert "etcd_restart" not in report
    assert report["failures"] == [], report["failures"]
    assert report["ok"] is True and proc.returncode == 0, stderr
