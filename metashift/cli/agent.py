"""``metashift agent``: the agent process, and the coordinator inside it (what it runs beside the
gateway unless the config says ``coordinator.enabled = false``): the wiring of the two in one
process lives here, in the entry point, so that neither package knows the other.

It stands for election in the agent's home store (where the cluster lives), and when a migration
completes and the agent's home moves to its target, it resigns there and stands again in the new
home: the way back is a new migration from there, coordinated by the same agents.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from typing import TYPE_CHECKING

from metashift.stores import Store

if TYPE_CHECKING:  # the agent and the coordinator load when an agent runs, not for --help
    from metashift.agent.server import Agent
    from metashift.coordinator.driver import Coordinator

log = logging.getLogger(__name__)
EXIT_USER_ERROR = 2


def coordinator_for(agent: Agent, store: Store) -> Coordinator:
    """A coordinator candidate in ``store`` that shares ``agent``'s session there and its credentials."""
    from metashift.coordinator.driver import Coordinator
    from metashift.copy.rules import configured_rules

    config = agent.config
    settings = config.coordinator
    return Coordinator(
        store,
        node_id=config.node_id,
        open_target=agent.open_target,
        url_for=agent.url_with_credentials,
        settings=settings,
        rules=configured_rules(settings.ledgers_roots, settings.counters),
    )


async def run_coordinator(agent: Agent) -> None:
    """Stand for election and coordinate while leader, in whichever store is the agent's home,
    until cancelled."""
    home = agent.home
    assert home is not None, "the agent must be started first"
    loop = asyncio.get_running_loop()
    while True:
        store = home.store
        assert isinstance(store, Store), "the agent's home must be a store of its own"
        coordinator = coordinator_for(agent, store)
        agent.metrics.watch_coordinator(lambda c=coordinator: _view(c))  # type: ignore[misc]
        candidate = loop.create_task(coordinator.run(), name="coordinator")
        moved = loop.create_task(home.wait_moved())
        try:
            await asyncio.wait({candidate, moved}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (candidate, moved):
                task.cancel()
            for task in (candidate, moved):  # a candidate that failed raises here
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        log.info("the agent's home moved to %s: standing for election there", home.store.url)


def _view(coordinator: Coordinator) -> tuple[bool, int, int]:
    """(leading, nodes done, nodes total) of ``coordinator``'s current pass, for the agent's metrics."""
    shown = coordinator.passes.progress if coordinator.leading else {}
    done, total = shown.get("done"), shown.get("total")
    return coordinator.leading, done if isinstance(done, int) else 0, total if isinstance(total, int) else 0


# ---- the command ---------------------------------------------------------------------------------


def _agent(args: argparse.Namespace) -> int:
    from metashift.agent import config
    from metashift.agent.server import run

    try:
        cfg = config.load(
            args.config,
            overrides={
                "source.url": args.source, "listen": args.listen, "node_id": args.node_id,
                "role": args.role, "metrics": args.metrics, "log_level": args.log_level,
                "zookeeper.listen": args.zk_listen, "session.state_dir": args.state_dir,
            },
        )
    except config.ConfigError as e:
        print(f"metashift: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    if args.check_config:
        print(config.summary(cfg), flush=True)
        return 0
    if not cfg.coordinator.enabled:
        return run(cfg)
    return run(cfg, run_coordinator)


def add_agent(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument("--zk-listen", metavar="HOST:PORT",
                   help="also serve ZooKeeper's client protocol there (e.g. 127.0.0.1:2181)")
    p.add_argument("--role", choices=["broker", "bookie"], help="what runs next to this agent")
    p.add_argument("--state-dir", metavar="DIR",
                   help="where the members' sessions are kept across a restart of the agent (a tmpfs; "
                        "default /run/metashift; '' keeps none)")
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics there")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--check-config", action="store_true",
                   help="load and check the whole configuration (file, environment, options) without serving: "
                   "exit 0 and a summary, or exit 2 with one line naming the bad key")
    p.set_defaults(handler=_agent)
