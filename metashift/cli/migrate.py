"""``metashift migrate check|start|status|abort``: the operator's commands, wired by the CLI
(which is the only importer of this module). Everything is read from and written to the source
store.

``check`` exits 0 when the cluster is ready to migrate, 1 when the pre-flight check found
something ``start`` would refuse, 2 on bad input or a source that cannot be read."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from typing import Any

from metashift.coordinator import cleanup, control, preflight
from metashift.coordinator.after_switch import AfterSwitch
from metashift.coordinator.progress import timing_text
from metashift.migration import paths
from metashift.migration.phase import Phase
from metashift.stores import open_store, parse_url, reserved
from metashift.stores.errors import AuthFailed, InvalidPath, StoreUnavailable

EXIT_USER_ERROR = 2
#: ``migrate check``: the check ran and found something ``start`` refuses.
EXIT_NOT_READY = 1
#: ``--wait``: how often the flag is read while following a migration.
FOLLOW_SECONDS = 0.5
#: ``status --watch --scan``: how often a store the cluster left is walked for writes since the switch.
AFTER_SWITCH_SECONDS = 10.0


def add_migrate(sub: argparse._SubParsersAction[argparse.ArgumentParser], runner: Any) -> None:
    p = sub.add_parser("migrate", help="start, follow or abort a migration of the whole cluster's metadata")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    c = verbs.add_parser("check", help="the pre-flight check: is every broker and bookie behind an agent, can "
                                       "every agent open the target, is the target empty (exit 0 ready, 1 not)")
    c.add_argument("--source", required=True, metavar="URL", help="the store the cluster uses now")
    c.add_argument("--target", required=True, metavar="URL", help="the store to move to")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.add_argument("--wait", metavar="SECONDS", default=None,
                   help="when the only problems are sessions no agent holds that nobody is known to renew (a member's "
                        "old session its process left), wait up to SECONDS for them to lapse, then answer")
    _agent_timeout(c)
    _migration_root(c)
    c.set_defaults(handler=lambda a: runner(_check(_rooted(a))))
    s = verbs.add_parser("start", help="start a migration: every agent freezes, the coordinator copies and switches")
    s.add_argument("--source", required=True, metavar="URL", help="the store the cluster uses now")
    s.add_argument("--target", required=True, metavar="URL", help="the (empty) store to move to")
    s.add_argument("--clean-target", action="store_true",
                   help="remove what the target holds first, after a confirmation (the way back: the store the "
                        "cluster left); refused while a cluster lives or migrates there")
    s.add_argument("--yes", action="store_true", help="confirm --clean-target without asking")
    s.add_argument("--force", action="store_true",
                   help="start although the pre-flight check found problems (needs --reason; what was overridden "
                        "goes into the flag and status)")
    s.add_argument("--reason", metavar="TEXT", help="why --force: recorded in the flag and shown by status")
    _agent_timeout(s)
    s.add_argument("--wait", action="store_true", help="follow the migration to its end (exit 0 COMPLETED, 1 FAILED)")
    s.add_argument("--json", action="store_true", help="print the status as JSON")
    _migration_root(s)
    s.set_defaults(handler=lambda a: runner(_start(_rooted(a))))
    t = verbs.add_parser("status", help="where the migration stands (read from the source store)")
    t.add_argument("--source", required=True, metavar="URL")
    t.add_argument("--json", action="store_true", help="print the status as JSON")
    t.add_argument("--watch", action="store_true", help="print again at every change until Ctrl-C")
    t.add_argument("--scan", action="store_true",
                   help="read from a store the cluster left: walk the whole store for what was written there since "
                        "the switch, instead of reading what the coordinator following it keeps (for a store nobody "
                        "follows any more; it takes a while on a large tree)")
    _migration_root(t)
    t.set_defaults(handler=lambda a: runner(_status(_rooted(a))))
    a = verbs.add_parser("abort", help="fail the running migration: every agent goes back to the source")
    a.add_argument("--source", required=True, metavar="URL")
    a.add_argument("--json", action="store_true", help="print the status as JSON")
    _migration_root(a)
    a.set_defaults(handler=lambda a: runner(_abort(_rooted(a))))


def _migration_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--migration-root", type=_root, default=None, metavar="PATH",
                   help=f"where the migration keeps its nodes in each store, as the agents' migration.root "
                        f"(default ${reserved.ENV}, else {reserved.DEFAULT_ROOT})")


def _root(text: str) -> str:
    try:
        return reserved.check_root(text)
    except (InvalidPath, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _rooted(args: argparse.Namespace) -> argparse.Namespace:
    """Use ``--migration-root`` (else ``$METASHIFT_MIGRATION_ROOT``, checked) before anything is read."""
    try:
        paths.use_root(args.migration_root or reserved.own_root())
    except (InvalidPath, ValueError) as e:
        print(f"metashift: error: {reserved.ENV}: {e}", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR) from None
    return args


def _agent_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent-timeout", type=_seconds, default=preflight.DRY_OPEN_WAIT, metavar="SECONDS",
                   help=f"how long to wait for every agent's dry open of the target "
                        f"(default {preflight.DRY_OPEN_WAIT:g})")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600 seconds: {text!r}")
    return value


async def _check(args: argparse.Namespace) -> int:
    wait = _check_wait(args.wait)
    if wait is None and args.wait is not None:
        return EXIT_USER_ERROR
    target = parse_url(args.target)  # a malformed URL: exit 2 before anything is contacted
    source_url = parse_url(args.source)
    try:
        opened = await open_store(source_url, create_root=False)
    except (StoreUnavailable, AuthFailed) as e:  # the check's own source line says why, in one line
        report = preflight.unreachable_source(source_url, target, e)
        print(json.dumps(report.to_dict(), indent=2) if args.json else report.text(), flush=True)
        return EXIT_NOT_READY
    async with opened as source:
        if wait is None:
            report = await preflight.check(source, target, wait=args.agent_timeout)
        else:
            report = await preflight.check_waiting(
                source, target, wait, wait=args.agent_timeout,
                say=lambda line: print(f"migrate check: {line}", file=sys.stderr, flush=True))
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text(), flush=True)
    return 0 if report.ready else EXIT_NOT_READY


def _check_wait(text: str | None) -> float | None:
    """``check --wait``'s seconds; ``None`` without it, or after saying in one line why not."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= preflight.MAX_WAIT:  # NaN and infinities too
        print(f"metashift: error: --wait takes a number of seconds from 0 to {preflight.MAX_WAIT:g}, not {text!r}",
              file=sys.stderr)
        return None
    return value


#: Said by ``migrate start`` into etcd, which then goes on: the cluster can live there on Pulsar 3.x
#: to 4.2.x, but not once it upgrades (apache/pulsar#25329, #25380).
ETCD_REMOVED = ("Pulsar 5.0 removed the etcd metadata store (PIP-462): a cluster on etcd must move to ZooKeeper or "
                "Oxia before it upgrades")


async def _start(args: argparse.Namespace) -> int:
    if args.force and not (args.reason or "").strip():
        print("metashift: error: --force needs --reason TEXT (why the pre-flight check is overridden: it goes "
              "into the flag and status)", file=sys.stderr)
        return EXIT_USER_ERROR
    if args.reason is not None and not args.force:
        print("metashift: error: --reason goes with --force", file=sys.stderr)
        return EXIT_USER_ERROR
    if parse_url(args.target).scheme == "etcd":
        print(f"metashift: warning: {ETCD_REMOVED}", file=sys.stderr, flush=True)
    async with await open_store(args.source, create_root=False) as source:
        try:
            if args.clean_target and not await _confirm_clean(args.target, args.yes):
                return EXIT_USER_ERROR
            flag, report = await control.start_checked(
                source, args.target, clean_target=args.clean_target,
                force_reason=args.reason.strip() if args.force else None, wait=args.agent_timeout,
            )
        except control.PreflightRefused as e:
            for problem in e.report.problems:
                print(f"metashift: error: {problem}", file=sys.stderr)
            print(f"metashift: error: {e}", file=sys.stderr)
            return EXIT_USER_ERROR
        except control.MigrationRefused as e:
            print(f"metashift: error: {e}", file=sys.stderr)
            return EXIT_USER_ERROR
        for warning in report.warnings:
            print(f"metashift: warning: {warning}", file=sys.stderr)
        if flag.forced is not None:
            for problem in flag.forced.problems:
                print(f"metashift: warning: overridden by --force: {problem}", file=sys.stderr)
        if not args.json:
            print(f"migration epoch {flag.epoch} started: {flag.phase.value} -> {flag.target_url}", flush=True)
        if not args.wait:
            if args.json:
                print(json.dumps((await control.status(source)).to_dict(), indent=2), flush=True)
            return 0
        final = await _follow(source, flag.epoch, show=not args.json)
        if final["phase"] == Phase.COMPLETED.value and final.get("lives_on"):
            # the end of the story: where the agents are now, and what the follower of this store
            # keeps of what was written here since (a read, never a walk of the tree)
            final = (await control.status(source, after_switch=True)).to_dict()
        if args.json:
            print(json.dumps(final, indent=2), flush=True)
        else:
            print(_text(final), flush=True)
        return 0 if final["phase"] == Phase.COMPLETED.value else 1


async def _confirm_clean(target_url: str, yes: bool) -> bool:
    """Say what ``--clean-target`` would remove and ask (``--yes``: do not ask). False: refused."""
    async with await open_store(target_url, watch=False, create_root=False) as target:
        if await cleanup.first_path(target) is None:
            return True  # empty: nothing to remove, nothing to ask
        await control.check_cleanable(target)
        shown = ", ".join(await cleanup.top_level(target))
    if yes:
        print(f"removing everything in the target {target.url} ({shown}; its migration flag stays)", file=sys.stderr)
        return True
    if not sys.stdin.isatty():
        print(f"metashift: error: --clean-target would remove everything in {target.url} ({shown}); "
              "confirm with --yes (no terminal to ask on)", file=sys.stderr)
        return False
    answer = await asyncio.to_thread(
        input, f"Remove everything in the target {target.url} ({shown}; its migration flag stays)? [y/N] "
    )
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("metashift: error: not confirmed; nothing was removed", file=sys.stderr)
    return False


async def _follow(source: Any, epoch: int, *, show: bool) -> dict[str, Any]:
    """Follow the migration ``epoch`` to COMPLETED or FAILED, with a progress display on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(file=sys.stderr), disable=not show or not sys.stderr.isatty(),
    )
    task = bar.add_task("starting", total=None)
    last_line = ""
    with bar:
        while True:
            now = (await control.status(source)).to_dict()
            if now["epoch"] != epoch:
                return now
            acked = sum(1 for p in now["participants"] if p["acknowledged"])
            total: int | None
            copy = now["copy"] or {}
            if now["phase"] == Phase.PREPARATION.value:
                description, done, total = "waiting for acknowledgements", acked, len(now["participants"])
            elif now["phase"] == Phase.COPYING.value:
                description = f"copying ({copy.get('stage') or 'starting'})"
                done, total = int(copy.get("done") or 0), int(copy.get("total") or 0) or None
            elif now["phase"] == Phase.COMPLETED.value and not now["released"]:
                description, done, total = "switching: releasing held writes", 0, 1
            else:
                description, done, total = now["phase"].lower(), 1, 1
            bar.update(task, description=description, completed=done, total=total)
            line = f"{now['phase']}: {description}"
            if show and not sys.stderr.isatty() and line != last_line:
                print(line, file=sys.stderr, flush=True)
                last_line = line
            # COMPLETED is the end once released: until then the coordinator still carries the
            # source's last changes, and the switch's position is not yet recorded
            if now["phase"] == Phase.FAILED.value or (now["phase"] == Phase.COMPLETED.value and now["released"]):
                return now
            await asyncio.sleep(FOLLOW_SECONDS)


async def _status(args: argparse.Namespace) -> int:
    async with await open_store(args.source, create_root=False) as source:
        last = None
        walked = 0.0
        written = None
        while True:
            # a scan of the old store walks it: not at every look (what its follower keeps is one read)
            walk = not args.scan or time.monotonic() - walked >= AFTER_SWITCH_SECONDS
            now = (await control.status(source, after_switch=walk, scan=args.scan)).to_dict()
            if walk:
                walked, written = time.monotonic(), now["writes_after_switch"]
            now["writes_after_switch"] = written
            shown = {k: v for k, v in now.items() if k != "elapsed_s"}
            if shown != last:
                print(json.dumps(now, indent=2) if args.json else _text(now), flush=True)
                last = shown
            if not args.watch:
                return 0
            await asyncio.sleep(FOLLOW_SECONDS)


async def _abort(args: argparse.Namespace) -> int:
    async with await open_store(args.source, create_root=False) as source:
        try:
            flag = await control.abort(source)
        except control.MigrationRefused as e:
            print(f"metashift: error: {e}", file=sys.stderr)
            return EXIT_USER_ERROR
        if args.json:
            print(json.dumps((await control.status(source)).to_dict(), indent=2), flush=True)
        else:
            print(f"migration epoch {flag.epoch} aborted: agents go back to the source", flush=True)
        return 0


def _text(status: dict[str, Any]) -> str:
    if status.get("lives_here"):
        origin = status["origin"]
        lines = [f"phase        none in progress: the cluster lives here (arrived from {origin['source']} in epoch "
                 f"{origin['epoch']})"]
    else:
        lines = [f"phase        {status['phase']}" + (f" (epoch {status['epoch']})" if status["epoch"] else "")]
    if status["target"]:
        lines.append(f"target       {status['target']}")
    if status.get("lives_on"):
        lines.append(f"lives on     {status['lives_on']} (the cluster went there: read its status there, "
                     f"metashift migrate status --source {status['lives_on']})")
    now = status.get("agents_now")
    if now:
        count = "?" if now.get("count") is None else now["count"]
        lines.append(f"agents now   {count} in {now['store']}" + (f" ({', '.join(now['node_ids'])})" if now["node_ids"]
                                                                   else "")
                     + (f": cannot read it from here ({now['error']})" if now.get("error") else ""))
    if status["reason"]:
        lines.append(f"reason       {status['reason']}")
    if status.get("forced"):
        forced = status["forced"]
        lines.append(f"forced       {forced['reason']} (started with --force past the pre-flight check)")
        for problem in forced.get("problems") or []:
            lines.append(f"  overridden {problem}")
    if status.get("writes_after_switch") is not None:
        lines.append(f"written here after the switch: {AfterSwitch.from_dict(status['writes_after_switch']).text()}")
    if status["coordinator"]:
        lines.append(f"coordinator  {status['coordinator']}")
    if status["copy"]:
        c = status["copy"]
        lines.append(f"copy         {_copy_text(c)}")
        for t in c.get("timings") or []:
            lines.append(f"  {timing_text(t)}")
        for path, counter in sorted((c.get("counters") or {}).items()):
            lines.append(f"  counter    {path}: {counter.get('carried')}, next id {counter.get('source')} in the "
                         f"source, {counter.get('target')} in the target ({counter.get('writes')} writes)")
    if status.get("dropped"):
        lines.append(f"dropped      {', '.join(status['dropped'])} (dead: no heartbeat in time, not waited for)")
    lines.append(f"elapsed      {status['elapsed_s']:.1f}s")
    left = " here (the agents moved with the cluster)" if status.get("lives_on") else ""
    lines.append(f"participants {len(status['participants'])}{left}")
    for p in status["participants"]:
        mark = "acknowledged" if p["acknowledged"] else "not acknowledged"
        if not p.get("alive", True):
            mark += f", no heartbeat for {p['heartbeat_age_s']}s"
        lines.append(f"  {p['node_id']:<24} {p['role']:<7} {mark}")
    return "\n".join(lines)


def _copy_text(copy: dict[str, Any]) -> str:
    """The copy's last progress: done of total when the total is known, else done so far; a pass
    the migration's end stopped says so."""
    done, total = copy.get("done") or 0, copy.get("total")
    if total:
        count = f"{done} of {total} nodes"
    elif done:
        count = f"{done} nodes" + ("" if copy.get("stopped") else " so far")
    else:
        count = ""
    if copy.get("summary"):  # a migration that completed: the whole of it, not its last step
        return str(copy["summary"])
    text = f"{copy.get('stage')}: {count}" if count else str(copy.get("stage"))
    if copy.get("stopped"):
        text += " (stopped: the migration failed)"
    return text + (", verified" if copy.get("verified") and copy.get("stage") != "verified" else "")
