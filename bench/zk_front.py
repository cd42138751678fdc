"""Benchmark (not a test): ZooKeeper's client protocol through the agent beside a direct ZooKeeper
connection, in one run.

Starts a local ZooKeeper and etcd, and two ``metashift agent`` processes serving ZooKeeper's
protocol (``--zk-listen``): one in front of the ZooKeeper, one in front of etcd. With kazoo (a
stock ZooKeeper client) against each of: ZooKeeper directly, agent -> ZooKeeper, agent -> etcd:
latency (p50/p99, one call at a time) of getData, setData and create of 1 KB values, and
throughput with ``--inflight`` calls pipelined on one session. Prints a table (``--json``: JSON).

    .venv/bin/python bench/zk_front.py [--ops 2000] [--inflight 64]
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient

from metashift.local_servers import LocalEtcd, LocalZooKeeper, free_port

VALUE = b"v" * 1024


def _wait_port(port: int, proc: subprocess.Popen[bytes], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the agent did not listen on {port}")


def _agent(source: str, workdir: str, name: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "METASHIFT_COORDINATOR_ENABLED": "false", "METASHIFT_LOG_LEVEL": "warning"}
    exe = os.path.join(os.path.dirname(sys.executable), "metashift")
    log = open(os.path.join(workdir, f"{name}.log"), "wb")  # lives as long as the agent
    proc = subprocess.Popen(
        [exe, "agent", "--source", source, "--listen", f"unix:{workdir}/{name}.sock",
         "--zk-listen", f"127.0.0.1:{port}", "--node-id", name],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    _wait_port(port, proc)
    return proc, port


def _latency(fn: Callable[[int], Any], ops: int) -> dict[str, float]:
    lat = []
    for i in range(ops):
        t = time.perf_counter()
        fn(i)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return {"p50_ms": round(statistics.median(lat) * 1000, 3), "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3)}


def _throughput(start: Callable[[int], Any], ops: int, inflight: int) -> float:
    t = time.perf_counter()
    pending: list[Any] = []
    for i in range(ops):
        pending.append(start(i))
        if len(pending) >= inflight:
            pending.pop(0).get()
    for p in pending:
        p.get()
    return round(ops / (time.perf_counter() - t))


def _run(hosts: str, ops: int, inflight: int) -> dict[str, Any]:
    k = KazooClient(hosts=hosts, timeout=30)
    k.start(timeout=30)
    try:
        k.ensure_path("/bench")
        k.create("/bench/node", VALUE)
        for i in range(ops):
            k.create_async(f"/bench/r{i}", VALUE)
        k.sync("/bench")
        out: dict[str, Any] = {
            "get": _latency(lambda i: k.get("/bench/node"), ops),
            "set": _latency(lambda i: k.set("/bench/node", VALUE), ops),
            "create": _latency(lambda i: k.create(f"/bench/c{i}", VALUE), ops),
            "get_per_s": _throughput(lambda i: k.get_async(f"/bench/r{i}"), ops, inflight),
            "set_per_s": _throughput(lambda i: k.set_async(f"/bench/r{i}", VALUE), ops, inflight),
            "create_per_s": _throughput(lambda i: k.create_async(f"/bench/p{i}", VALUE), ops, inflight),
        }
        k.delete("/bench", recursive=True)
        return out
    finally:
        k.stop()
        k.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="ms-zkbench-")
    zk, etcd = LocalZooKeeper(), LocalEtcd()
    agents: list[subprocess.Popen[bytes]] = []
    try:
        zk.start()
        etcd.start()
        p1, zk_port = _agent(zk.url + "/via-agent", workdir, "agent-zk")
        agents.append(p1)
        p2, etcd_port = _agent(etcd.url + "/via-agent", workdir, "agent-etcd")
        agents.append(p2)
        results = {
            "zookeeper direct": _run(f"127.0.0.1:{zk.port}", args.ops, args.inflight),
            "agent -> zookeeper": _run(f"127.0.0.1:{zk_port}", args.ops, args.inflight),
            "agent -> etcd": _run(f"127.0.0.1:{etcd_port}", args.ops, args.inflight),
        }
    finally:
        for proc in agents:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        zk.cleanup()
        etcd.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps({"ops": args.ops, "inflight": args.inflight, "results": results}, indent=2))
        return 0
    print(f"ZooKeeper protocol, kazoo, 1 KB values, {args.ops} ops; throughput with {args.inflight} in flight")
    header = (f"{'':20} {'get p50/p99 ms':>16} {'set p50/p99 ms':>16} {'create p50/p99':>16} "
              f"{'get/s':>8} {'set/s':>8} {'create/s':>9}")
    print(header)
    for name, r in results.items():
        print(
            f"{name:20} {r['get']['p50_ms']:>7}/{r['get']['p99_ms']:<8} "
            f"{r['set']['p50_ms']:>7}/{r['set']['p99_ms']:<8} "
            f"{r['create']['p50_ms']:>7}/{r['create']['p99_ms']:<8} {r['get_per_s']:>8} {r['set_per_s']:>8} "
            f"{r['create_per_s']:>9}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
