"""The ``metashift`` command: wires the parts together; nothing imports it.

Each subcommand parses its arguments here and calls into the part that does the work.
Errors the user can fix (bad URL, unreachable store, bad config) print one clear line on stderr
and exit non-zero; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from metashift.agent.stores import MetadataStoreError

EXIT_USER_ERROR = 2


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency; keep working without it
        return asyncio.run(coro)


# ---- demo ---------------------------------------------------------------------------------------


async def _demo(args: argparse.Namespace) -> int:
    from metashift.demo import run_demo

    return await run_demo(args)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="start local ZooKeeper and etcd and show metashift at work")
    p.add_argument("--topics", type=int, default=2000, help="size of the sample tree (default 2000)")
    p.set_defaults(handler=lambda a: _run(_demo(a)))


# ---- servers ------------------------------------------------------------------------------------


def _servers(args: argparse.Namespace) -> int:
    from metashift.agent.stores.local_servers import LocalEtcd, LocalZooKeeper

    zk, etcd = LocalZooKeeper(), LocalEtcd()
    try:
        zk.start()
        etcd.start()
        print(f"zookeeper: {zk.url}  (data {zk.data_dir})")
        print(f"etcd:      {etcd.url}  (data {etcd.data_dir})")
        print("Ctrl-C stops both.", flush=True)
        import signal

        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    finally:
        zk.cleanup()
        etcd.cleanup()
    return 0


def _add_servers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("servers", help="run a local ZooKeeper and etcd until Ctrl-C (for trying things)")
    p.set_defaults(handler=_servers)


# ---- agent --------------------------------------------------------------------------------------


def _agent(args: argparse.Namespace) -> int:
    from metashift.agent import config
    from metashift.agent.server import run

    try:
        cfg = config.load(
            args.config,
            overrides={
                "source.url": args.source, "listen": args.listen, "node_id": args.node_id,
                "role": args.role, "metrics": args.metrics, "log_level": args.log_level,
            },
        )
    except config.ConfigError as e:
        print(f"metashift: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    return run(cfg)


def _add_agent(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "agent",
        help="run the sidecar agent: the gRPC gateway a broker or bookie reaches its metadata through",
        description="Run the metashift agent. Settings come from --config (TOML), then METASHIFT_* "
        "environment variables, then these options.",
    )
    p.add_argument("--config", metavar="FILE", help="TOML config file (see packaging/agent.toml)")
    p.add_argument("--source", metavar="URL", help="source store URL (zk://... or etcd://...)")
    p.add_argument("--listen", metavar="ADDRESS", help="unix:/path/to.sock (default) or tcp://host:port (TLS)")
    p.add_argument("--node-id", help="this node's name (default: the host name)")
    p.add_argument("--role", choices=["broker", "bookie"], help="what runs next to this agent")
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics there")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.set_defaults(handler=_agent)


# ---- main ---------------------------------------------------------------------------------------

_SUBCOMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _add_agent,
    _add_demo,
    _add_servers,
]


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
