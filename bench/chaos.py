"""The chaos run (a benchmark, not a test): N whole migrations, each with one fault chosen and timed
by a seeded random generator, each checked for lost writes and linearizability.

    .venv/bin/python bench/chaos.py --runs 50                 # seeds 1..50
    .venv/bin/python bench/chaos.py --runs 10 --first-seed 100 --fault kill-coordinator
    .venv/bin/python bench/chaos.py --seed 17                 # replay one run, in this process
    .venv/bin/python bench/chaos.py --runs 10 --source zk --target oxia --fault target-stall
    .venv/bin/python bench/chaos.py --replicas 3 --runs 50 --pairs all   # replicated stores, the six pairs

With ``--replicas 3`` each store is a replicated one (a ZooKeeper ensemble, an etcd cluster, an
Oxia cluster of a coordinator and 3 data servers, replication factor 3, 3 shards) and a seed also
draws its faults: a leader SIGKILLed (``kill-source-leader``, ``kill-target-leader``: the time to a
new leader is measured) and one agent cut off from its stores (``partition-agent``). ``--pairs``
runs every pair named (``all``: the six) seed by seed, so that a run stopped early (Ctrl-C: the run
under way is stopped, the table of those done printed) has as many runs of each; the table per
store pair gives runs, lost writes, non-linearizable histories, the longest freeze and the longest
leader election.

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
import contextlib
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
from metashift_lab.sandbox.faults import ASKED_ONLY, FAULTS, PHASES, RENAMED, REPLICATED, FaultPlan
from metashift_lab.sandbox.options import Options
from metashift_lab.sandbox.servers import KINDS
from metashift_lab.servers import ServerStartError

#: Longest one run may take, start to cleanup (seconds): past it, the run counts as stuck.
RUN_LIMIT = 1800
#: The freeze (first gate closed to last opened) the product promises under any single fault (issue 40).
FREEZE_BOUND_S = 10.0


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
    if (row.get("freeze_s") or 0.0) > FREEZE_BOUND_S:
        why.append(f"freeze of {row['freeze_s']:.2f} s, over the {FREEZE_BOUND_S:g} s bound")
    return why


async def one_run(plan: FaultPlan, options: Options, verify_tree: bool) -> dict[str, Any]:
    """One migration with its fault, judged; its work directory is kept when it failed."""
    sandbox = ChaosSandbox(options, plan, verify_tree=verify_tree)
    loop = asyncio.get_running_loop()
    work = loop.create_task(sandbox.run(), name="chaos run")
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, work.cancel)
    # the replicas from the start: a run that errors must still replay on the stores it ran on
    row: dict[str, Any] = {"seed": plan.seed, "fault": plan.fault, "phase": plan.phase, "replicas": plan.replicas}
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
                   target=args.target, replicas=args.replicas)  # fmt: skip


HEADER = (f"{'seed':>5} {'fault':<17} {'phase':<11} {'landed':<18} {'outcome':<10} {'freeze s':>8} "
          f"{'slowest s':>9} {'acked':>6} {'lost':>4} {'ops':>6} {'unknown':>7} {'linearizable':<12} "
          f"{'secs':>5} {'elect s':>7}")  # fmt: skip


def line(row: dict[str, Any]) -> str:
    pair = f"{row['pair']:<10} " if row.get("pair") else ""
    if row.get("error"):
        return f"{pair}{row['seed']:>5} {row['fault']:<17} {row['phase']:<11} ERROR {row['error'][:120]}"
    freeze = "-" if row.get("freeze_s") is None else f"{row['freeze_s']:.2f}"
    lin = {True: "yes", False: "NO", None: "undecided"}[row.get("linearizable")]
    election = "-" if row.get("election_s") is None else f"{row['election_s']:.2f}"
    return (f"{pair}{row['seed']:>5} {row['fault']:<17} {row['phase']:<11} {row['landed']:<18} {row['outcome']:<10} "
            f"{freeze:>8} {row['slowest_write_ms'] / 1000:>9.2f} {row['acked']:>6} {row['lost']:>4} "
            f"{row['operations']:>6} {row['unknown']:>7} {lin:<12} {row['seconds']:>5.0f} {election:>7}"
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
        where = ""
        if r.get("pair"):
            source, target = r["pair"].split("->")
            where = f" --source {source} --target {target}"
        if r.get("replicas", 1) > 1:
            where += f" --replicas {r['replicas']}"
        out.append(f"  seed {r['seed']}: {'; '.join(failed(r))} (replay: bench/chaos.py --seed {r['seed']}"
                   f"{where}{forced})")
    return "\n".join(out)


def pair_table(rows: list[dict[str, Any]]) -> str:
    """Per store pair: runs, how they ended, lost writes, non-linearizable histories, the longest
    freeze and the longest leader election (a markdown table)."""
    out = ["| pair | runs | COMPLETED | FAILED | other | lost writes | not linearizable | longest freeze s "
           "| leader kills | longest election s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for pair in sorted({r.get("pair", "") for r in rows}):
        mine = [r for r in rows if r.get("pair", "") == pair]
        done = [r for r in mine if not r.get("error")]
        freezes = [r["freeze_s"] for r in done if r.get("freeze_s") is not None]
        elections = [r["election_s"] for r in done if r.get("election_s") is not None]
        ended = collections.Counter(r.get("outcome", "ERROR") for r in mine)
        out.append(f"| {pair or '-'} | {len(mine)} | {ended['COMPLETED']} | {ended['FAILED']} | "
                   f"{len(mine) - ended['COMPLETED'] - ended['FAILED']} | {sum(r.get('lost', 0) for r in done)} | "
                   f"{sum(1 for r in done if r.get('linearizable') is not True)} | "
                   f"{max(freezes, default=0.0):.2f} | {len(elections)} | "
                   f"{max(elections, default=0.0):.2f} |")  # fmt: skip
    return "\n".join(out)


def child_command(seed: int, args: argparse.Namespace, pair: tuple[str, str]) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(seed), "--topics", str(args.topics),
               "--brokers", str(args.brokers), "--bookies", str(args.bookies),
               "--hold-timeout", str(args.hold_timeout), "--source", pair[0],
               "--target", pair[1], "--replicas", str(args.replicas)]  # fmt: skip
    if args.fault:
        command += ["--fault", args.fault]
    if args.phase:
        command += ["--phase", args.phase]
    if args.verify_tree:
        command.append("--verify-tree")
    if args.spark_in_freeze:
        command.append("--spark-in-freeze")
    return command


#: Every ordered pair of distinct store kinds (``--pairs all``).
ALL_PAIRS = [(s, t) for s in KINDS for t in KINDS if s != t]


def pairs_of(text: str | None, source: str, target: str) -> list[tuple[str, str]]:
    """``--pairs``: ``all``, or ``SOURCE:TARGET`` comma-separated; without it, ``--source``/``--target``."""
    if text is None:
        return [(source, target)]
    if text == "all":
        return list(ALL_PAIRS)
    out = []
    for item in text.split(","):
        got = tuple(item.strip().split(":"))
        if got not in ALL_PAIRS:
            raise ValueError(f"not a pair of two store kinds (zk, etcd, oxia): {item!r}")
        out.append((got[0], got[1]))
    return out


def _one(seed: int, pair: tuple[str, str], args: argparse.Namespace, log_path: Path) -> dict[str, Any]:
    """One run as a child process; its row (an error row when it gave none)."""
    out = ""
    with open(log_path, "w") as log:
        proc = processes.start(child_command(seed, args, pair), stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            out, _ = proc.communicate(timeout=RUN_LIMIT)
        except subprocess.TimeoutExpired:
            processes.signal_group(proc, signal.SIGTERM)
            out, _ = proc.communicate(timeout=120)
        except BaseException:  # Ctrl-C: the run under way stops (it cleans up after itself)
            processes.signal_group(proc, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=120)
            processes.stop(proc, grace=1.0)
            raise
    try:
        return dict(json.loads(out.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"seed": seed, "fault": args.fault or "?", "phase": args.phase or "?",
                "error": f"no report (exit {proc.returncode}); see {log_path}"}  # fmt: skip


def drive(args: argparse.Namespace, pairs: list[tuple[str, str]]) -> int:
    """Every run in a process of its own (a run that hangs or crashes spoils no other); with several
    pairs, each seed on every pair before the next seed."""
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    named = len(pairs) > 1 or args.replicas > 1
    print(f"# chaos run: {args.runs} migrations per pair, seeds {args.first_seed}..{args.first_seed + args.runs - 1}, "
          f"pairs {', '.join(f'{s}->{t}' for s, t in pairs)}, --replicas {args.replicas}, --topics {args.topics}; "
          f"logs in {log_dir}", flush=True)  # fmt: skip
    print(("pair       " if named else "") + HEADER, flush=True)
    rows: list[dict[str, Any]] = []

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)
    interrupted = False
    try:
        with open(log_dir / "rows.jsonl", "a") as kept:
            for seed in range(args.first_seed, args.first_seed + args.runs):
                for pair in pairs:
                    name = f"{pair[0]}->{pair[1]}"
                    suffix = f"-{pair[0]}-{pair[1]}" if named else ""
                    row = _one(seed, pair, args, log_dir / f"seed-{seed}{suffix}.log")
                    row["forced"] = bool(args.fault or args.phase)
                    if named:
                        row["pair"] = name
                    rows.append(row)
                    kept.write(json.dumps(row) + "\n")
                    kept.flush()
                    print(line(row), flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print(f"# interrupted: {len(rows)} runs done", flush=True)
    print(summary(rows), flush=True)
    if named:
        print(f"\nper store pair (replicas {args.replicas}):\n{pair_table(rows)}", flush=True)
    return 130 if interrupted else 1 if any(failed(r) for r in rows) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--seed", type=int, help="replay one run (in this process) and print its details")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fault", choices=[*FAULTS, *ASKED_ONLY, *REPLICATED, *RENAMED],
                        help="this fault in every run (default: drawn from the seed, among "
                        f"{', '.join(FAULTS[1:])}; with --replicas above 1, half the runs among "
                        f"{', '.join(REPLICATED)})")
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
    parser.add_argument("--replicas", type=int, default=1,
                        help="members of each store: 1 (single servers, default) or odd above (replicated stores)")
    parser.add_argument("--pairs", metavar="PAIRS",
                        help="store pairs, each SOURCE:TARGET (zk:oxia,oxia:etcd) or all (the six); runs them seed "
                        "by seed (overrides --source and --target)")
    parser.add_argument("--log-dir", default="chaos-logs")
    args = parser.parse_args()
    if args.replicas < 1 or args.replicas % 2 == 0:
        parser.error(f"--replicas must be a positive odd number, not {args.replicas}")
    if args.fault in REPLICATED and args.replicas == 1:
        parser.error(f"--fault {args.fault} is a fault of replicated stores: give --replicas 3")
    try:
        pairs = pairs_of(args.pairs, args.source, args.target)
    except ValueError as e:
        parser.error(str(e))
    if args.pairs is None and args.source == args.target:
        parser.error(f"--source and --target are both {args.source}: a migration needs another store")
    if args.child is not None or args.seed is not None:
        seed = args.child if args.child is not None else args.seed
        plan = FaultPlan.draw(seed, args.fault, args.phase, spark_in_freeze=args.spark_in_freeze,
                              replicas=args.replicas)  # fmt: skip
        row = asyncio.run(one_run(plan, options_from(args), args.verify_tree))
        if args.child is not None:
            print(json.dumps(row), flush=True)
            return 0
        print(HEADER)
        print(line(row))
        print(json.dumps(row, indent=2))
        return 1 if failed(row) else 0
    return drive(args, pairs)


if __name__ == "__main__":
    sys.exit(main())
