"""``metashift copy`` and ``metashift verify``: the bulk copy of a tree and its verification, Spark
jobs (``metashift.spark``), with the rules of what is copied and how counters are carried."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _progress_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="progress bars on stderr (default: when stderr is a terminal)",
    )  # fmt: skip


def _rules(args: argparse.Namespace) -> Any:
    from metashift.copy.rules import DEFAULT_COUNTERS, DEFAULT_LEDGERS_ROOTS, Rules, default_excluded

    return Rules(
        excluded=default_excluded() + tuple(args.exclude or ()),
        counters=tuple(args.counter) if args.counter else DEFAULT_COUNTERS,
        ledgers_roots=tuple(r for r in args.ledgers_root if r) if args.ledgers_root else DEFAULT_LEDGERS_ROOTS,
    )


def _rules_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--exclude", action="append", metavar="PATH", help="another subtree not to copy (repeatable)")
    p.add_argument(
        "--counter", action="append", metavar="PATTERN",
        help="plain sequential parents, carried exactly ('*' = one segment; repeatable; replaces the "
        "default /counters/*)",
    )  # fmt: skip
    p.add_argument(
        "--ledgers-root", action="append", metavar="PATH",
        help="a BookKeeper ledgers root (zkLedgersRootPath) whose ledger-id generator (PATH/idgen, "
        "PATH/idgen-long) is carried by a jump to a new HOB- node (repeatable; replaces the default "
        "/ledgers; '' for none)",
    )  # fmt: skip


def _spark_job_flags(p: argparse.ArgumentParser) -> None:
    """What copy and verify both take: the two stores, the Spark master, output, rules, progress."""
    p.add_argument("--source", required=True, metavar="URL")
    p.add_argument("--target", required=True, metavar="URL")
    p.add_argument("--spark-master", metavar="M", help="Spark master URL (default local[*])")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _rules_flags(p)
    _progress_flag(p)


_CONFLICTS_SHOWN = 50


def _spark_missing() -> bool:
    """Say so (one line, stderr) when this node cannot run a Spark job: no PySpark or no Java."""
    from metashift.agent.requirements import missing_for_coordinator

    missing = missing_for_coordinator()
    if missing is not None:
        print(f"metashift: error: this command runs a Spark job, but {missing}", file=sys.stderr)
    return missing is not None


def _copy(args: argparse.Namespace) -> int:
    if _spark_missing():
        return 2
    from metashift.copy.report import dumps
    from metashift.spark.copy import copy_tree
    from metashift.spark.report import CopyConflict, make_progress

    try:
        report = copy_tree(
            args.source, args.target, master=args.spark_master, verify=args.verify, rules=_rules(args),
            progress=make_progress(args.progress),
        )  # fmt: skip
    except CopyConflict as e:
        # every conflicting path (up to a screenful), then the one-line error
        for path, why in e.conflicts[:_CONFLICTS_SHOWN]:
            print(f"conflict: {path}: {why}", file=sys.stderr)
        if len(e.conflicts) > _CONFLICTS_SHOWN:
            print(f"conflict: ... and {len(e.conflicts) - _CONFLICTS_SHOWN} more", file=sys.stderr)
        raise
    print(dumps(report) if args.json else report.text(), flush=True)
    return 1 if report.verify is not None and not report.verify.ok else 0


def add_copy(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``metashift copy``."""
    p = sub.add_parser("copy", help="copy every persistent node (exact versions) and the sequence counters, on Spark")
    _spark_job_flags(p)
    p.add_argument("--verify", action="store_true", help="verify the target afterwards (exit 1 on any mismatch)")
    p.set_defaults(handler=_copy)


def _verify(args: argparse.Namespace) -> int:
    if _spark_missing():
        return 2
    from metashift.copy.report import dumps
    from metashift.spark.report import make_progress
    from metashift.spark.verify import verify_tree

    report = verify_tree(
        args.source, args.target, master=args.spark_master, rules=_rules(args), progress=make_progress(args.progress)
    )
    print(dumps(report) if args.json else report.text(), flush=True)
    return 0 if report.ok else 1


def add_verify(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``metashift verify``."""
    p = sub.add_parser("verify", help="compare every persistent node and the counters of two stores, on Spark")
    _spark_job_flags(p)
    p.set_defaults(handler=_verify)
