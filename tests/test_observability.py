"""What an operator imports (issue 35): the Grafana dashboard and the Prometheus alert rules under
``packaging/`` name only metrics a running agent serves, and the rules pass ``promtool check
rules`` (Debian's ``prometheus`` package)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from metashift_lab.servers import free_port
from tests.harness import Gateways, require_part

PACKAGING = Path(__file__).resolve().parent.parent / "packaging"
DASHBOARD = PACKAGING / "grafana" / "metashift-dashboard.json"
RULES = PACKAGING / "prometheus" / "metashift-alerts.yml"
METRIC = re.compile(r"\b(metashift_[a-z_]+)\b")


def _named(text: str) -> set[str]:
    return set(METRIC.findall(text))


def _served(exposition: str) -> set[str]:
    """Every sample name on a /metrics page."""
    names = set()
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


async def test_every_metric_of_the_dashboard_and_the_rules_is_served(zk_url: str, gateways: Gateways) -> None:
    port = free_port()
    await gateways.start(zk_url, {"metrics": f"127.0.0.1:{port}", "node_id": "broker-1"})
    page = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30)
                                   .read().decode())
    served = _served(page)
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs and all(e.strip() for e in exprs)
    named = _named("\n".join(exprs)) | _named(RULES.read_text())
    # what the operator asked to see: phase, held writes, hold time, gate, requests, latency,
    # sessions, copy progress, heartbeat age
    wanted = {
        "metashift_agent_migration_phase", "metashift_agent_held_writes", "metashift_agent_write_hold_seconds_bucket",
        "metashift_agent_write_gate_open", "metashift_agent_requests_total", "metashift_agent_request_seconds_bucket",
        "metashift_agent_sessions", "metashift_coordinator_copy_nodes_done", "metashift_coordinator_copy_nodes_total",
        "metashift_agent_heartbeat_age_seconds",
    }
    assert wanted <= named, wanted - named
    assert named <= served, f"named but not served: {sorted(named - served)}"


def test_the_alert_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        require_part("no promtool: make setup installs Debian's prometheus package")
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout, done.stdout
