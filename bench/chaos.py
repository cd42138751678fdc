"""The chaos run (a benchmark, not a test): N whole migrations, each with one fault chosen and timed
by a seeded random generator, each checked for lost writes and linearizability.

    .venv/bin/python bench/chaos.py --runs 50                 # seeds 1..50
    .venv/bin/python bench/chaos.py --runs 10 --first-seed 100 --fault kill-coordinator
    .venv/bin/python bench/chaos.py --seed 17                 # replay one run, in this process
    .venv/bin/python bench/chaos.py --runs 10 --source zk --target oxia --fault target-stall

Each run is ``metashift sandbox``'s migration (local ZooKeeper -> etcd by default, ``--source`` and
``--target`` name other kinds: zk, etcd, oxia; one agent process per broker and bookie, writers
through them; ``metashift/sandbox/``) with ``metashift/sandbox/faults.py``'s fault (the store faults
strike the source's or the target's server, whatever its kind), and register clients on both of the
agent's protocols (``metashift.client`` and kazoo through ``--zk-listen``) recording a history,
judged by ``tests/linearizability.py``. Prints one line per run (seed, fault, the phase asked for
and the phase it came in, outcome, longest freeze, slowest acknowledged write, writes acknowledged
and lost, operations and unknown outcomes in the history, linearizable), then the table of outcomes,
and the seed of every failed run (a lost write, a non-linearizable history, a run stuck or broken):
``--seed`` replays it. The work directory (agents' logs, the history as ``history.jsonl``) of a
failed run, or of a migration that did not complete, is kept; each run's own log is in
``--log-dir``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checker is test code: tests/

from metashift import processes
from metashift.stores import MetadataStoreError
from metashift_lab.agents import AgentStartError
from metashift_lab.linearizability.checker import check
from metashift_lab.sandbox.chaos import ChaosSandbox
from metashift_lab.sandbox.faults import ASKED_ONLY, FAULTS, PHASES, RENAMED, FaultPlan
from metashift_lab.sandbox.options import Options
from metashift_lab.sandbox.servers import KINDS
from metashift_lab.servers import ServerStartError

#: Longest one run may take, start to cleanup (seconds): past it, the run counts as stuck.
RUN_LIMIT = 1800


def failed(row: dict[str, Any]) -> list[str]:
    """Why a run counts as failed (empty: it did not)."""
    why = []
    if row.get("error"):
        why.append(f"error: {row['error']}")
    if row.get("lost"):
        why.append(f"{row['lost']} acknowledged write(s) lost")
    if row.get("linearizable") is not True and not row.get("error"):
        why.append("history not linearizable" if row.get("linearizable") is False else "history undecided")
    if row.get("outcome") not in ("COMPLETED", "FAILED") and not row.get("error"):
        why.append(f"outcome {row.get('outcome')}")
    if row.get("ephemerals_missing"):
        why.append(f"ephemerals missing: {row['ephemerals_missing']}")
    return why


async def one_run(plan: FaultPlan, options: Options, verify_tree: bool) -> dict[str, Any]:
    """One migration with its fault, judged; its work directory is kept when it failed."""
    sandbox = ChaosSandbox(options, plan, verify_tree=verify_tree)
    loop = asyncio.get_running_loop()
    work = loop.create_task(sandbox.run(), name="chaos run")
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, work.cancel)
    row: dict[str, Any] = {"seed": plan.seed, "fault": plan.fault, "phase": plan.phase}
    try:
        try:
            await work
        except (AgentStartError, ServerStartError, MetadataStoreError) as e:
            row["error"] = f"{type(e).__name__}: {e}"
        if "error" not in row:
            row.update(sandbox.row())
            started = time.process_time()
            verdict = check(sandbox.history.ops)
            row["linearizable"] = verdict.linearizable if all(k.linearizable is not None for k in verdict.keys) \
                else None  # fmt: skip
            row["check_cpu_s"] = round(time.process_time() - started, 2)
            if not verdict.linearizable:
                print(verdict.describe(), file=sys.stderr, flush=True)
        # kept for a look: a failed run, and a migration that did not complete
        if (failed(row) or row.get("outcome") != "COMPLETED") and sandbox.work_dir is not None:
            sandbox.options.keep = True
            sandbox.history.save(sandbox.work_dir / "history.jsonl")
            row["kept"] = str(sandbox.work_dir)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await sandbox.cleanup()
    return row


def options_from(args: argparse.Namespace) -> Options:
    return Options(topics=args.topics, brokers=args.brokers, bookies=args.bookies, clients_per_agent=1,
                   hold_timeout=args.hold_timeout, warmup=2.0, after=3.0, source=args.source,
                   target=args.target)  # fmt: skip


HEADER = (f"{'seed':>5} {'fault':<17} {'phase':<11} {'landed':<18} {'outcome':<10} {'freeze s':>8} "
          f"{'slowest s':>9} {'acked':>6} {'lost':>4} {'ops':>6} {'unknown':>7} {'linearizable':<12} "
          f"{'secs':>5}")  # fmt: skip


def line(row: dict[str, Any]) -> str:
    if row.get("error"):
        return f"{row['seed']:>5} {row['fault']:<17} {row['phase']:<11} ERROR {row['error'][:120]}"
    freeze = "-" if row.get("freeze_s") is None else f"{row['freeze_s']:.2f}"
    lin = {True: "yes", False: "NO", None: "undecided"}[row.get("linearizable")]
    return (f"{row['seed']:>5} {row['fault']:<17} {row['phase']:<11} {row['landed']:<18} {row['outcome']:<10} "
            f"{freeze:>8} {row['slowest_write_ms'] / 1000:>9.2f} {row['acked']:>6} {row['lost']:>4} "
            f"{row['operations']:>6} {row['unknown']:>7} {lin:<12} {row['seconds']:>5.0f}"
            + (f"  FAILED RUN: {'; '.join(failed(row))}" if failed(row) else ""))  # fmt: skip


def summary(rows: list[dict[str, Any]]) -> str:
    out = ["", "outcomes (fault x phase it came in):"]
    table: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in rows:
        table[(r["fault"], r.get("landed", "-"))][r.get("outcome", "ERROR")] += 1
    for (fault, landed), counts in sorted(table.items()):
        out.append(f"  {fault:<17} {landed:<18} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    done = [r for r in rows if not r.get("error")]
    freezes = [r for r in done if r.get("freeze_s") is not None]
    if freezes:
        top = max(freezes, key=lambda r: r["freeze_s"])
        out.append(f"longest freeze: {top['freeze_s']:.2f}s (seed {top['seed']}, {top['fault']} in {top['landed']}, "
                   f"{top['outcome']})")  # fmt: skip
    slowest = max(done, key=lambda r: r["slowest_write_ms"], default=None)
    if slowest is not None:
        out.append(f"slowest acknowledged write: {slowest['slowest_write_ms'] / 1000:.2f}s (seed {slowest['seed']})")
    out.append(f"runs: {len(rows)}; writes acknowledged: {sum(r.get('acked', 0) for r in done)}, "
               f"lost: {sum(r.get('lost', 0) for r in done)}; histories: {len(done)}, operations: "
               f"{sum(r.get('operations', 0) for r in done)}, not linearizable: "
               f"{sum(1 for r in done if r.get('linearizable') is not True)}")  # fmt: skip
    bad = [r for r in rows if failed(r)]
    out.append(f"failed runs: {len(bad)}")
    for r in bad:
        forced = f" --fault {r['fault']} --phase {r['phase']}" if r.get("forced") else ""
        out.append(f"  seed {r['seed']}: {'; '.join(failed(r))} (replay: bench/chaos.py --seed {r['seed']}{forced})")
    return "\n".join(out)


def child_command(seed: int, args: argparse.Namespace) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(seed), "--topics", str(args.topics),
               "--brokers", str(args.brokers), "--bookies", str(args.bookies),
               "--hold-timeout", str(args.hold_timeout), "--source", args.source,
               "--target", args.target]  # fmt: skip
    if args.fault:
        command += ["--fault", args.fault]
    if args.phase:
        command += ["--phase", args.phase]
    if args.verify_tree:
        command.append("--verify-tree")
    if args.spark_in_freeze:
        command.append("--spark-in-freeze")
    return command


def drive(args: argparse.Namespace) -> int:
    """Every run in a process of its own (a run that hangs or crashes spoils no other)."""
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"# chaos run: {args.runs} migrations, seeds {args.first_seed}..{args.first_seed + args.runs - 1}, "
          f"--topics {args.topics}; logs in {log_dir}", flush=True)  # fmt: skip
    print(HEADER, flush=True)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.runs):
        with open(log_dir / f"seed-{seed}.log", "w") as log:
            proc = processes.start(child_command(seed, args), stdout=subprocess.PIPE, stderr=log, text=True)
            try:
                out, _ = proc.communicate(timeout=RUN_LIMIT)
            except subprocess.TimeoutExpired:
                processes.signal_group(proc, signal.SIGTERM)
                out, _ = proc.communicate(timeout=120)
        try:
            row = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            row = {"seed": seed, "fault": args.fault or "?", "phase": args.phase or "?",
                   "error": f"no report (exit {proc.returncode}); see {log_dir}/seed-{seed}.log"}  # fmt: skip
        row["forced"] = bool(args.fault or args.phase)
        rows.append(row)
        print(line(row), flush=True)
    with open(log_dir / "rows.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(summary(rows), flush=True)
    return 1 if any(failed(r) for r in rows) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--seed", type=int, help="replay one run (in this process) and print its details")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fault", choices=[*FAULTS, *ASKED_ONLY, *RENAMED],
                        help="this fault in every run (default: drawn from the seed, among "
                        f"{', '.join(FAULTS)})")
    parser.add_argument("--phase", choices=PHASES, help="this phase in every run (default: drawn from the seed)")
    parser.add_argument("--topics", type=int, default=20, help="size of the Pulsar tree (sandbox --topics)")
    # three agents: a coordinator, and participants to kill or stop besides it
    parser.add_argument("--brokers", type=int, default=2)
    parser.add_argument("--bookies", type=int, default=1)
    parser.add_argument("--hold-timeout", type=float, default=30.0, help="the agents' gate.hold_timeout")
    parser.add_argument("--verify-tree", action="store_true", help="also run metashift verify (Spark) after COMPLETED")
    parser.add_argument("--spark-in-freeze", action="store_true",
                        help="the freeze's last delta carried by a Spark pass (COPYING lasts seconds)")
    parser.add_argument("--source", choices=KINDS, default="zk", help="the store kind migrated from (default zk)")
    parser.add_argument("--target", choices=KINDS, default="etcd", help="the store kind migrated into (default etcd)")
    parser.add_argument("--log-dir", default="chaos-logs")
    args = parser.parse_args()
    if args.source == args.target:
        parser.error(f"--source and --target are both {args.source}: a migration needs another store")
    if args.child is not None or args.seed is not None:
        seed = args.child if args.child is not None else args.seed
        plan = FaultPlan.draw(seed, args.fault, args.phase, spark_in_freeze=args.spark_in_freeze)
        row = asyncio.run(one_run(plan, options_from(args), args.verify_tree))
        if args.child is not None:
            print(json.dumps(row), flush=True)
            return 0
        print(HEADER)
        print(line(row))
        print(json.dumps(row, indent=2))
        return 1 if failed(row) else 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
