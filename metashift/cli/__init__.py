"""The ``metashift`` command: wires the parts together; nothing imports it.

Each subcommand parses its arguments here and calls into the part that does the work.
Errors the user can fix (bad URL, unreachable store, bad config) print one clear line on stderr
and exit non-zero; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from importlib.metadata import entry_points
from typing import Any

from metashift import grpc_env
from metashift.stores import MetadataStoreError
from metashift.stores.aio import run_loop

EXIT_USER_ERROR = 2


def _run(coro: Coroutine[Any, Any, int]) -> int:
    return run_loop(coro)


# ---- main ---------------------------------------------------------------------------------------

def _add_agent(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from metashift.cli.agent import add_agent

    add_agent(sub)


_SUBCOMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _add_agent,
    lambda sub: _add_copy(sub),
    lambda sub: _add_verify(sub),
    lambda sub: _add_migrate(sub),
]
#: Commands other distributions add (metashift's lab: sandbox, demo, servers, generate, bench).
COMMANDS_GROUP = "metashift.commands"
#: The lab's commands, named when the lab is not installed.
LAB_COMMANDS = ("sandbox", "demo", "servers", "generate", "bench")


def _add_migrate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from metashift.cli.migrate import add_migrate

    add_migrate(sub, _run)


def _add_copy(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from metashift.cli.copy import add_copy

    add_copy(sub)


def _add_verify(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from metashift.cli.copy import add_verify

    add_verify(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metashift",
        description="Move an Apache Pulsar cluster's metadata between metadata stores without downtime.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in _SUBCOMMANDS:
        add(sub)
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            add = entry.load()
        except ImportError:  # declared by a distribution whose code is not reachable here
            continue
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    grpc_env.configure()  # first: nothing has loaded grpc yet, which reads it once
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    if given and given[0] in LAB_COMMANDS and given[0] not in _commands(parser):
        print(f"metashift: error: '{given[0]}' is a command of metashift's lab, which is not installed here "
              "(pip install ./lab from a checkout; make setup does)", file=sys.stderr)
        return EXIT_USER_ERROR
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        if not getattr(args, "passes_unknown", False):
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args.bench_args = unknown
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except MetadataStoreError as e:
        print(f"metashift: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("metashift: interrupted", file=sys.stderr)
        return 130


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()
