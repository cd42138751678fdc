"""PIP-454's own migration beside metashift's, on the same Pulsar 4.2.4 cluster and traffic.

A benchmark, not a test.

Two runs, one after the other, each a fresh cluster (a bookie and two brokers, ledgers rolling every
20 entries; producers and consumers counting every message, the admin loop), migrated from ZooKeeper
into Oxia under that traffic (``metashift_lab.pulsar_cluster.side_by_side``):

1. PIP-454: born on ZooKeeper with no agent (brokers on ``zk:``, the bookie on ``metadata-store:zk:``);
   ``POST /admin/v2/metadata/migration/start?target=oxia://...`` (what ``pulsar-admin
   metadata-migration start`` sends), its flag followed in ZooKeeper to COMPLETED or FAILED;
2. metashift: on its agents; ``metashift migrate start --wait``.

Prints a Markdown table, a row per measure and a column per run (``--json``: the figures as JSON
after it):

    .venv/bin/python bench/pip454_vs_metashift.py [--json] [--keep] [--warmup S] [--after S] [--native]
                                                  [--only pip454|metashift]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from metashift_lab.pulsar_cluster import PulsarRelease, find_release
from metashift_lab.pulsar_cluster.side_by_side import KINDS, Side, measure, table

RELEASE = "4.2.4"


def say(line: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)


async def run_all(args: argparse.Namespace) -> list[Side] | None:
    """Both runs, one after the other; ``None`` when Ctrl-C or SIGTERM stopped them (each run's
    cluster is cleaned up either way)."""
    release = find_release(RELEASE)
    loop = asyncio.get_running_loop()
    work = loop.create_task(_runs(args, release))
    interrupted: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if not interrupted:
            interrupted.append(sig)
            say(f"{sig.name}: stopping and cleaning up ...")
            work.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await work
    except asyncio.CancelledError:
        if not interrupted:
            raise
        return None
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _runs(args: argparse.Namespace, release: PulsarRelease) -> list[Side]:
    sides = []
    for kind in args.only or KINDS:
        work_dir = Path(tempfile.mkdtemp(prefix=f"metashift-bench-{kind}-"))
        say(f"--- {kind}: work directory {work_dir}; Pulsar {release.version}")
        try:
            sides.append(await measure(kind, release, work_dir, warmup=args.warmup, after=args.after,
                                       native=args.native, keep=args.keep, say=say))  # fmt: skip
        finally:
            if not args.keep:
                shutil.rmtree(work_dir, ignore_errors=True)
    return sides


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON after the table")
    parser.add_argument("--keep", action="store_true", help="keep each run's work directory (every log)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of traffic before the migration")
    parser.add_argument("--after", type=float, default=15.0, help="seconds of traffic after COMPLETED")
    parser.add_argument("--native", action="store_true",
                        help="then restart the bookie and brokers on Oxia's own URL, no agent, and read back")
    parser.add_argument("--only", choices=KINDS, action="append", help="run only this side (repeatable)")
    args = parser.parse_args()
    started = time.monotonic()
    sides = asyncio.run(run_all(args))
    if sides is None:
        return 130
    print(table(sides))
    print(f"\n(Pulsar {RELEASE}, zk -> oxia; {time.monotonic() - started:.0f} s in all)")
    if args.json:
        print(json.dumps([s.to_dict() for s in sides], indent=2, default=str))
    return 0 if all(s.phase == "COMPLETED" for s in sides) else 1


if __name__ == "__main__":
    sys.exit(main())
