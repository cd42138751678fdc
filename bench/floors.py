"""What the agent benchmarks share: a server process (an agent, or a bare server in its place) and
its CPU and memory, latency and
throughput figures, the paths measured side by side, and the table with ratios (the raw etcd
floor is ``raw_etcd``).

The agent's CPU per operation is read from the kernel (every thread's ``schedstat``, in ns): it is
the least noisy figure on a shared machine, where throughput and latency move with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from metashift import processes
from metashift_lab.cli_runner import cli_command

VALUE = b"v" * 1024


# ---- the agent process -----------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """A server process a benchmark measures: a ``metashift agent``, or a bare server in its place."""

    proc: subprocess.Popen[bytes]
    socket_path: str
    zk_port: int | None = None

    def cpu_ns(self) -> int:
        """CPU time of every thread of the agent so far, in ns (``/proc/<pid>/task/*/schedstat``)."""
        total = 0
        base = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(base):
            try:
                with open(f"{base}/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
                continue
        return total

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
        return 0.0

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL past 15 seconds."""
        processes.stop(self.proc, 15)


def start_agent(source: str, workdir: str, name: str, *, zk_port: int | None = None) -> ServerProcess:
    """Start an agent in front of ``source`` (with the ZooKeeper front on ``zk_port`` when given)."""
    env = {**os.environ, "METASHIFT_COORDINATOR_ENABLED": "false", "METASHIFT_LOG_LEVEL": "warning"}
    sock = f"{workdir}/{name}.sock"
    cmd = cli_command("agent", "--source", source, "--listen", f"unix:{sock}", "--node-id", name)
    if zk_port is not None:
        cmd += ["--zk-listen", f"127.0.0.1:{zk_port}"]
    log = open(os.path.join(workdir, f"{name}.log"), "wb")  # lives as long as the agent
    proc = processes.start(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    agent = ServerProcess(proc, sock, zk_port)
    wait_serving(agent, lambda: os.path.exists(sock) and (zk_port is None or listening(zk_port)), 90,
                 f"the agent (log: {workdir}/{name}.log)")  # fmt: skip
    return agent


def wait_serving(server: ServerProcess, ready: Callable[[], bool], within: float, what: str) -> None:
    """Return once ``ready()``; when the process ends first or ``within`` seconds pass, stop it and
    raise ``RuntimeError`` naming ``what``."""
    deadline = time.monotonic() + within
    while not ready():
        code = server.proc.poll()
        if code is not None or time.monotonic() > deadline:
            server.stop()
            how = f"exited with {code}" if code is not None else f"not serving within {within:g} s"
            raise RuntimeError(f"{what} did not start: {how}")
        time.sleep(0.05)


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# ---- figures ----------------------------------------------------------------------------------------


def latency_figures(latencies: list[float]) -> dict[str, float]:
    latencies = sorted(latencies)
    return {
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 3),
    }


@dataclass
class Figures:
    """One operation on one path: throughput, latency, and the agent's CPU per call."""

    per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    serial_p50_ms: float = 0.0
    serial_p99_ms: float = 0.0
    agent_us_per_op: float | None = None
    serial_agent_us_per_op: float | None = None
    """The agent's CPU per call one at a time: what a call costs it at a broker's low rates, where
    every call wakes it from sleep (several times its share with many in flight)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def of(
        cls, serial: list[float], per_s: float, latencies: list[float], cpu_ns: int | None, calls: int,
        serial_cpu_ns: int | None = None,
    ) -> Figures:
        """From a one-at-a-time run's latencies, a concurrent run's rate and latencies, and the
        agent's CPU (ns) over the concurrent run's ``calls`` and over the one-at-a-time calls
        (None: no agent on the path)."""
        s, p = latency_figures(serial), latency_figures(latencies)
        cpu = None if cpu_ns is None else round(cpu_ns / calls / 1000, 1)
        lone = None if serial_cpu_ns is None else round(serial_cpu_ns / len(serial) / 1000, 1)
        return cls(round(per_s), p["p50_ms"], p["p99_ms"], s["p50_ms"], s["p99_ms"], cpu, lone)


@dataclass
class Table:
    """Rows (paths) x operations, each row optionally compared with a floor row."""

    ops: list[str]
    rows: dict[str, dict[str, Figures]] = field(default_factory=dict)
    floors: dict[str, str] = field(default_factory=dict)
    rss_mb: dict[str, float] = field(default_factory=dict)
    hop: str | None = None
    """The row of a bare hop to the agent (``grpc_hop``): each floored row's p50 beyond its floor
    and that hop is the agent's own."""
    bare: dict[str, str] = field(default_factory=dict)
    """Agent row -> the row of the barest server in its place (``grpc_hop --store``, ``tcp_proxy``):
    its p50 beyond its floor is the least such a server adds; the agent's beyond it is its own work."""
    bare_floors: dict[str, str] = field(default_factory=dict)
    """Bare row -> its floor, where it is not its agent's (a bare gateway reaches etcd through the
    store layer, whose direct row is its floor, not the raw etcd one)."""
    bare_throughput: bool = False
    """Whether the bare rows' throughput is a floor too (a proxy's is; the bare gateway answers in order)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": {name: {op: f.as_dict() for op, f in row.items()} for name, row in self.rows.items()},
            "floors": self.floors,
            "hop": self.hop,
            "bare": self.bare,
            "bare_floors": self.bare_floors,
            "bare_throughput": self.bare_throughput,
            "ratios": self.ratios(),
            "agent_rss_mb": self.rss_mb,
        }

    def ratios(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per row with a floor, per operation: its throughput ratio and p50 difference (ms), its p50
        beyond the hop, and beside a bare row what that row adds to its own floor (p50, and
        throughput when it is a floor) and the row's p50 beyond it."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name, floor in self.floors.items():
            out[name] = {}
            for op in self.ops:
                row, under = self.rows[name][op], self.rows[floor][op]
                plus = row.serial_p50_ms - under.serial_p50_ms
                out[name][op] = {
                    "throughput_x": round(row.per_s / max(under.per_s, 1e-9), 2),
                    "serial_p50_plus_ms": round(plus, 3),
                }
                if self.hop is not None:
                    out[name][op]["serial_p50_beyond_hop_ms"] = round(plus - self.rows[self.hop][op].serial_p50_ms, 3)
                if name in self.bare:
                    bare_name = self.bare[name]
                    bare, its_floor = self.rows[bare_name][op], self.rows[self.bare_floors.get(bare_name, floor)][op]
                    out[name][op]["bare_p50_plus_ms"] = round(bare.serial_p50_ms - its_floor.serial_p50_ms, 3)
                    if self.bare_throughput:
                        out[name][op]["bare_throughput_x"] = round(bare.per_s / max(its_floor.per_s, 1e-9), 2)
                    out[name][op]["serial_p50_beyond_bare_ms"] = round(row.serial_p50_ms - bare.serial_p50_ms, 3)
        return out

    def render(self, title: str, inflight: int) -> str:
        lines = [title]
        head = f"{'path':25}"
        for op in self.ops:
            head += f" | {op + '/s':>8} {'x floor':>7} {'p50':>6} {'+ms':>6} {'p99':>6} {'us/op':>6} {'lone':>5}"
        lines.append(head)
        sub = f" | {'(' + str(inflight) + ' in flight)':>16} {'(one at a time, ms)':>20} {'agent':>6} {'agent':>5}"
        lines.append(f"{'':25}" + sub * len(self.ops))
        ratios = self.ratios()
        bares = set(self.bare.values())
        for name, row in self.rows.items():
            line = f"{name:25}"
            kind = "hop" if name == self.hop else "bare" if name in bares else "floor"
            for op in self.ops:
                f = row[op]
                r = ratios.get(name, {}).get(op)
                x = f"{r['throughput_x']:.2f}x" if r else kind
                plus = f"{r['serial_p50_plus_ms']:+.2f}" if r else ""
                cpu = f"{f.agent_us_per_op:.0f}" if f.agent_us_per_op is not None else "-"
                lone = f"{f.serial_agent_us_per_op:.0f}" if f.serial_agent_us_per_op is not None else "-"
                line += (f" | {f.per_s:>8.0f} {x:>7} {f.serial_p50_ms:>6.2f} {plus:>6} {f.serial_p99_ms:>6.2f} {cpu:>6}"
                         f" {lone:>5}")
            lines.append(line)

        def per_op(name: str, key: str, fmt: str = "+.2f", unit: str = "") -> str:
            return ", ".join(f"{op} {ratios[name][op][key]:{fmt}}{unit}" for op in self.ops)

        if self.hop is not None:
            for name in self.floors:
                lines.append(f"{name}: p50 beyond its floor and the bare hop (ms, the agent's own): "
                             f"{per_op(name, 'serial_p50_beyond_hop_ms')}")  # fmt: skip
        for name, bare in self.bare.items():
            if name not in self.floors:  # no floor measured (a store given by URL): nothing to compare
                continue
            lines.append(f"{name}: {bare} adds p50 {per_op(name, 'bare_p50_plus_ms')} ms to its floor; the agent "
                         f"adds {per_op(name, 'serial_p50_beyond_bare_ms')} beyond it")  # fmt: skip
            if self.bare_throughput:
                rates = per_op(name, "bare_throughput_x", ".2f", "x")
                lines.append(f"{name}: {bare} gives {rates} its floor's throughput")
        if self.rss_mb:
            rss = ", ".join(f"{k} {v} MB" for k, v in self.rss_mb.items())
            lines.append(f"agent resident memory after the load: {rss}")
        return "\n".join(lines)


def _spread_of(xs: list[float], fmt: str) -> str:
    xs = sorted(xs)
    return " / ".join(format(x, fmt) for x in (xs[0], statistics.median(xs), xs[-1]))


def spread(runs: list[Table]) -> str:
    """min / median / max of each ratio over repeated runs."""
    if len(runs) < 2:
        return ""
    lines = [f"spread over {len(runs)} runs (min / median / max)"]
    first = runs[0]
    ratios = [t.ratios() for t in runs]
    for name in first.floors:
        for op in first.ops:
            def of(key: str, fmt: str = "+.2f") -> str:
                return _spread_of([r[name][op][key] for r in ratios], fmt)  # noqa: B023 - used at once

            line = (
                f"  {name:22} {op:7} throughput x {of('throughput_x', '.2f')}   p50 +ms {of('serial_p50_plus_ms')}"
                f"   agent us/op {_spread_of([t.rows[name][op].agent_us_per_op or 0.0 for t in runs], '.0f')}"
                f" (one at a time {_spread_of([t.rows[name][op].serial_agent_us_per_op or 0.0 for t in runs], '.0f')})"
            )
            if first.hop is not None:
                line += f"   beyond the hop +ms {of('serial_p50_beyond_hop_ms')}"
            if name in first.bare:
                line += f"   bare +ms {of('bare_p50_plus_ms')}, agent beyond {of('serial_p50_beyond_bare_ms')}"
                if first.bare_throughput:
                    line += f"   bare throughput x {of('bare_throughput_x', '.2f')}"
            lines.append(line)
    return "\n".join(lines)


# ---- asyncio load ----------------------------------------------------------------------------------


async def async_serial(op: Callable[[int], Awaitable[Any]], ops: int) -> list[float]:
    lat = []
    for i in range(ops):
        t = time.perf_counter()
        await op(i)
        lat.append(time.perf_counter() - t)
    return lat


async def async_concurrent(op: Callable[[int], Awaitable[Any]], ops: int, inflight: int) -> tuple[float, list[float]]:
    """``ops`` calls with ``inflight`` in flight: (ops/s, latencies)."""
    lat: list[float] = []
    counter = iter(range(ops))

    async def worker() -> None:
        for i in counter:
            t = time.perf_counter()
            await op(i)
            lat.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return ops / (time.perf_counter() - start), lat


# ---- paths measured side by side --------------------------------------------------------------------


Call = Callable[[int], Awaitable[Any]]


class Path(Protocol):
    """One way to reach a store (direct, or through an agent) that a benchmark measures."""

    name: str
    agent: ServerProcess | None

    async def serial(self, op: str, calls: int) -> list[float]: ...

    async def concurrent(self, op: str, calls: int, inflight: int) -> tuple[float, list[float]]: ...


@dataclass
class CallPath:
    """A path driven by asyncio calls: op -> (one-at-a-time call, concurrent call). A call's
    argument is unique over the whole run, so that creates never meet an existing name."""

    name: str
    calls: dict[str, tuple[Call, Call]]
    agent: ServerProcess | None = None
    issued: dict[str, int] = field(default_factory=dict)

    def _first(self, op: str, calls: int) -> int:
        first = self.issued.get(op, 0)
        self.issued[op] = first + calls
        return first

    async def serial(self, op: str, calls: int) -> list[float]:
        first, call = self._first(op, calls), self.calls[op][0]
        return await async_serial(lambda i: call(first + i), calls)

    async def concurrent(self, op: str, calls: int, inflight: int) -> tuple[float, list[float]]:
        first, call = self._first(op, calls), self.calls[op][1]
        return await async_concurrent(lambda i: call(first + i), calls, inflight)


def add_rounds_argument(parser: argparse.ArgumentParser) -> None:
    """``--rounds``, the argument of ``measure`` that a benchmark's command line sets."""
    parser.add_argument("--rounds", type=int, default=5,
                        help="turns of every path per operation, side by side (default 5): throughput is "
                             "the median of a path's rounds")


async def measure(paths: list[Path], ops: list[str], calls: int, inflight: int, rounds: int) -> Table:
    """Every path's figures, side by side: per operation, a warm-up on each path, then ``rounds``
    rounds in which each path takes its turn (the order reversed every other round), so that a
    change in the machine's load weighs on a path and its floor alike. Throughput is the median of
    a path's rounds, latencies are pooled, the agent's CPU is over all its concurrent calls."""
    table = Table(ops)
    for path in paths:
        table.rows[path.name] = {}
    lone_calls = max(calls // 3 // rounds, 50)
    for op in ops:
        for path in paths:
            await path.concurrent(op, min(200, calls), inflight)  # warm-up, not counted
        lone: dict[str, list[float]] = {p.name: [] for p in paths}
        lat: dict[str, list[float]] = {p.name: [] for p in paths}
        rates: dict[str, list[float]] = {p.name: [] for p in paths}
        cpu: dict[str, int] = {p.name: 0 for p in paths}
        lone_cpu: dict[str, int] = {p.name: 0 for p in paths}
        for r in range(rounds):
            for path in paths if r % 2 == 0 else paths[::-1]:
                agent_ns = path.agent.cpu_ns if path.agent else lambda: 0
                before = agent_ns()
                lone[path.name] += await path.serial(op, lone_calls)
                between = agent_ns()
                rate, latencies = await path.concurrent(op, calls, inflight)
                lone_cpu[path.name] += between - before
                cpu[path.name] += agent_ns() - between
                rates[path.name].append(rate)
                lat[path.name] += latencies
        for path in paths:
            table.rows[path.name][op] = Figures.of(
                lone[path.name], statistics.median(rates[path.name]), lat[path.name],
                cpu[path.name] if path.agent else None, calls * rounds,
                lone_cpu[path.name] if path.agent else None,
            )  # fmt: skip
    return table
