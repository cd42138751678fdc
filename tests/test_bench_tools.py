"""The agent benchmarks run from a clean clone and report every row beside its floor: a tiny run of
``bench/gateway.py`` and ``bench/zk_front.py`` (real ZooKeeper, etcd and agents, started by the
benchmark itself), its JSON read back. Figures are not judged here (speed is the benchmarks' to
print); what is checked is that every path answered and every comparison is there."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _run(script: str, *args: str) -> dict[str, Any]:
    # its own process group: a benchmark that hangs is interrupted (its servers and agents are
    # stopped by its own cleanup), then killed with everything it started
    bench = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / script), "--ops", "40", "--rounds", "1", "--json", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        out, err = bench.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        bench.send_signal(signal.SIGINT)
        try:
            bench.communicate(timeout=30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(bench.pid, signal.SIGKILL)
        raise AssertionError(f"{script} did not finish within 180 s") from None
    assert bench.returncode == 0, err[-3000:]
    report: dict[str, Any] = json.loads(out)
    assert len(report["runs"]) == 1
    run: dict[str, Any] = report["runs"][0]
    return run


def _answered(run: dict[str, Any], ops: list[str]) -> None:
    for name, row in run["rows"].items():
        for op in ops:
            assert row[op]["per_s"] > 0 and row[op]["serial_p50_ms"] > 0, (name, op, row[op])


def test_the_gateway_benchmark_runs_every_path_beside_its_floors() -> None:
    run = _run("gateway.py")
    ops = ["get", "put", "create"]
    assert set(run["rows"]) == {
        "gRPC hop (echo)", "zookeeper direct", "bare gateway -> zookeeper", "agent -> zookeeper",
        "etcd raw (Pulsar txns)", "etcd direct (store)", "bare gateway -> etcd", "agent -> etcd",
    }
    _answered(run, ops)
    assert run["floors"] == {"agent -> zookeeper": "zookeeper direct", "agent -> etcd": "etcd raw (Pulsar txns)"}
    assert run["bare"] == {"agent -> zookeeper": "bare gateway -> zookeeper", "agent -> etcd": "bare gateway -> etcd"}
    for name in ("agent -> zookeeper", "agent -> etcd"):
        for op in ops:
            ratio = run["ratios"][name][op]
            assert set(ratio) >= {"throughput_x", "serial_p50_plus_ms", "serial_p50_beyond_hop_ms",
                                  "bare_p50_plus_ms", "serial_p50_beyond_bare_ms"}
            # the agent's and the bare gateway's CPU are read from their processes
            assert run["rows"][name][op]["agent_us_per_op"] > 0
            assert run["rows"][run["bare"][name]][op]["serial_agent_us_per_op"] > 0
    assert set(run["agent_rss_mb"]) == {"zk", "etcd"} and all(mb > 0 for mb in run["agent_rss_mb"].values())


def test_the_zookeeper_front_benchmark_runs_every_path_beside_its_floors() -> None:
    run = _run("zk_front.py")
    ops = ["get", "set", "create"]
    assert set(run["rows"]) == {
        "zookeeper direct", "bare proxy -> zookeeper", "agent -> zookeeper", "etcd raw (Pulsar txns)", "agent -> etcd",
    }
    _answered(run, ops)
    assert run["bare"] == {"agent -> zookeeper": "bare proxy -> zookeeper"}
    for op in ops:
        assert set(run["ratios"]["agent -> zookeeper"][op]) >= {"throughput_x", "serial_p50_plus_ms",
                                                                "bare_p50_plus_ms", "bare_throughput_x"}
        assert set(run["ratios"]["agent -> etcd"][op]) >= {"throughput_x", "serial_p50_plus_ms"}
        assert run["rows"]["bare proxy -> zookeeper"][op]["agent_us_per_op"] > 0
