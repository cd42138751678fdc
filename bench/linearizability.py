"""How fast the linearizability checker judges histories (a benchmark, not a test).

Simulated concurrent clients on true registers (``tests/histories.py``), so every history is
linearizable; prints, per size, the operations, keys, clients, unknown outcomes, the checker's
CPU seconds and wall seconds, and operations per CPU second:

    .venv/bin/python bench/linearizability.py                  # 10k, 30k and 100k operations
    .venv/bin/python bench/linearizability.py --ops 20000 --keys 1 --clients 10

A history with one fault (``--fault lost-write``, ``stale-read``, ``stale-cas``) shows what a
non-linearizable verdict and its smallest window cost: the search must rule out every order.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checker is test code: tests/

from metashift_lab.linearizability.checker import check
from metashift_lab.linearizability.simulate import simulate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--keys", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--unknown", type=float, default=0.002, help="share of writes with an unknown outcome")
    parser.add_argument("--fault", choices=["lost-write", "stale-read", "stale-cas"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'operations':>10} {'keys':>4} {'clients':>7} {'unknown':>7} {'verdict':>14} {'cpu s':>7} "
          f"{'wall s':>7} {'ops/cpu s':>10} {'window':>6}")  # fmt: skip
    for ops in args.ops:
        for keys in args.keys:
            history = simulate(args.seed, ops, keys=keys, clients=args.clients, unknown=args.unknown,
                               fault=args.fault)  # fmt: skip
            unknown = sum(1 for o in history if o.status == "unknown")
            cpu, wall = time.process_time(), time.monotonic()
            result = check(history)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            verdict = "linearizable" if result.linearizable else "NOT"
            window = len(result.failures[0].window) if result.failures else 0
            print(f"{ops:>10} {keys:>4} {args.clients:>7} {unknown:>7} {verdict:>14} {cpu:>7.2f} {wall:>7.2f} "
                  f"{ops / max(cpu, 1e-9):>10.0f} {window:>6}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
