"""``metashift servers``: a local ZooKeeper and etcd until Ctrl-C or SIGTERM, then nothing left;
with ``--replicas 3`` a ZooKeeper ensemble, an etcd cluster and an Oxia cluster of three, each
serving on after its leader's SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from metashift.stores import open_store
from metashift.stores.oxia.keys import key_hash
from metashift_lab.ports import listener_pids
from metashift_lab.replicated.oxia import shard_assignments
from metashift_lab.replicated.zookeeper import four_letter
from tests.harness import require_oxia
from tests.procs import cmdline, descendants, starttime


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_servers_stop_cleanly_on_ctrl_c_and_sigterm(sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "metashift.cli", "servers"], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        found = [re.search(r"//127\.0\.0\.1:(\d+)\s+\(data (.+)\)", line) for line in lines[:2]]
        assert all(found), lines
        ports = [int(m.group(1)) for m in found if m]
        dirs = [Path(m.group(2)) for m in found if m]
        for port in ports:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert not any(d.exists() for d in dirs)


def _leader_port(kind: str, ports: list[int], key: str) -> int:
    """The client port of the member that leads (Oxia: the shard holding ``key``), asked of the
    members at ``ports`` themselves: ZooKeeper's ``srvr``, etcd's status, Oxia's shard
    assignments. Raises ``LookupError`` (or ``OSError``) while they name none among them."""
    if kind == "zookeeper":
        return next((p for p in ports if "Mode: leader" in four_letter(p, "srvr")), None) or _none(kind)
    if kind == "etcd":
        ids: dict[int, int] = {}
        leader = 0
        for port in ports:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v3/maintenance/status", data=b"{}")
            with urllib.request.urlopen(request, timeout=5) as r:
                status = json.load(r)
            ids[int(status["header"]["member_id"])] = port
            leader = int(status.get("leader", 0))
        return ids.get(leader) or _none(kind)
    h = key_hash(key)
    address = next(a for _, low, high, a in shard_assignments(f"127.0.0.1:{ports[0]}") if low <= h <= high)
    port = int(address.rsplit(":", 1)[1]) if address else 0
    return port if port in ports else _none(kind)


def _none(kind: str) -> int:
    raise LookupError(f"{kind}: no member of those left names a leader among them")


def _new_leader(kind: str, ports: list[int], key: str) -> int:
    """The leader the members at ``ports`` elect (bounded: a minute)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return _leader_port(kind, ports, key)
        except (LookupError, OSError, grpc.RpcError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


async def _write_read(url: str, key: str, value: bytes) -> None:
    store = await open_store(f"{url}?timeout=60")
    try:
        await store.put(key, value)
        got = await store.get(key)
        assert got is not None and got[0] == value, (url, got)
    finally:
        await store.close()


def test_servers_with_replicas_run_stores_of_three_that_outlive_their_leader() -> None:
    require_oxia()
    proc = subprocess.Popen([sys.executable, "-m", "metashift.cli", "servers", "--replicas", "3"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    stores: dict[str, tuple[str, list[int], Path]] = {}
    try:
        assert proc.stdout is not None
        for _ in range(4):  # three stores, then the Ctrl-C line (readline ends at EOF if it dies)
            line = proc.stdout.readline()
            found = re.match(r"(\w+):\s+(\w+://(\S+?))(/default)?\s+\(data (.+)\)$", line.strip())
            if found is None:
                assert "Ctrl-C" in line, (line, stores)
                break
            ports = [int(h.rsplit(":", 1)[1]) for h in found.group(3).split(",")]
            stores[found.group(1)] = (found.group(2) + (found.group(4) or ""), ports, Path(found.group(5)))
        assert set(stores) == {"zookeeper", "etcd", "oxia"}, stores
        assert all(len(ports) == 3 for _, ports, _ in stores.values()), stores
        members = descendants(proc.pid)
        for kind, (url, ports, _) in stores.items():
            key = f"/servers-test/{kind}"
            asyncio.run(_write_read(url, key, b"before"))
            leader = _leader_port(kind, ports, key)
            pids = listener_pids(leader) & set(members)
            assert len(pids) == 1, (kind, leader, pids)
            killed = time.monotonic()
            os.kill(pids.pop(), signal.SIGKILL)
            # the two members left elect a leader, then serve through the same URL
            elected = _new_leader(kind, [p for p in ports if p != leader], key)
            took = time.monotonic() - killed
            print(f"{kind}: leader on port {leader} killed, port {elected} leads {took:.2f}s after")
            asyncio.run(_write_read(url, key, b"after the leader's SIGKILL"))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    left = {pid: cmdline(pid) for pid, started in members.items() if starttime(pid) == started}
    assert not left, left
    for _, ports, directory in stores.values():
        assert not directory.exists(), directory
        for port in ports:
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.parametrize("replicas", ["2", "0", "-3", "three"])
def test_servers_refuse_replicas_that_are_not_a_positive_odd_number(replicas: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "metashift.cli", "servers", "--replicas", replicas],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("metashift servers: error: argument --replicas: "), proc.stderr
    assert ("must be odd" if replicas == "2" else "at least 1" if replicas.lstrip("-").isdigit()
            else "not a whole number") in error, error  # fmt: skip
