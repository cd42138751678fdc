"""The write pause of a whole migration at several sizes (a benchmark, not a test).

Runs ``metashift sandbox --json --beside-copy`` (local ZooKeeper and etcd, one agent process per
broker and bookie, clients writing all the time) for each tree size, one after another, and prints
for each the write hold (p50, p99, max of the writes held by the freeze) and the freeze (first
gate closed to last reopened), beside the size, the full passes, the whole migration (``start``
to COMPLETED) against ``metashift copy --verify`` of the same tree alone on the same machine
(``--beside-copy``), and the time the whole run took:

    .venv/bin/python bench/migration_pause.py                       # 10k, 100k and 1M nodes
    .venv/bin/python bench/migration_pause.py --topics 2000 17000   # 10k and 100k nodes

The goals: p99 write hold under 1 s and freeze under 2 s at every size (issue "Online pre-copy");
the whole migration within 1.5x of ``copy --verify`` of the same tree (issue 18).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from metashift_lab.cli_runner import run_cli_sync

#: ``--topics`` for about 10k, 100k and 1M nodes (about 5.8 nodes per topic).
DEFAULT_TOPICS = (2000, 17000, 170000)


def run(topics: int, extra: list[str]) -> dict[str, Any]:
    args = ["sandbox", "--topics", str(topics), "--json", "--beside-copy", *extra]
    print(f"# metashift {' '.join(args)}", file=sys.stderr, flush=True)
    done = run_cli_sync(*args, stderr=None)  # its progress on the terminal
    try:
        return dict(json.loads(done.stdout))
    except ValueError:
        return {"phase": f"no report (exit {done.returncode})"}


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, nargs="+", default=list(DEFAULT_TOPICS))
    parser.add_argument("--json", action="store_true", help="print every report as JSON too")
    args, extra = parser.parse_known_args()
    rows = []
    for topics in args.topics:
        report = run(topics, extra)
        rows.append(report)
        if args.json:
            print(json.dumps(report, indent=2), flush=True)
    header = f"{'nodes':>9} {'phase':>10} {'passes':>6} {'hold p50':>9} {'hold p99':>9} {'hold max':>9} " \
             f"{'freeze':>9} {'acked':>7} {'lost':>5} {'migration':>10} {'copy+vfy':>9} {'x copy':>7} {'total s':>8}"
    print(header)
    for r in rows:
        hold = r.get("write_hold_ms") or {}
        freeze = r.get("freeze_ms")
        print(f"{r.get('nodes', 0):>9} {r.get('phase', '?'):>10} {r.get('passes', 0):>6} "
              f"{hold.get('p50', 0):>7.0f}ms {hold.get('p99', 0):>7.0f}ms {hold.get('max', 0):>7.0f}ms "
              f"{(freeze or 0):>7.0f}ms {r.get('writes_acknowledged', 0):>7} {r.get('writes_lost', 0):>5} "
              f"{r.get('migration_seconds', 0):>9.1f}s {r.get('copy_verify_seconds', 0):>8.1f}s "
              f"{_ratio(r.get('migration_vs_copy')):>7} {r.get('seconds', 0):>8.1f}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
