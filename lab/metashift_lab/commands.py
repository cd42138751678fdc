"""The lab's ``metashift`` commands: ``sandbox``, ``demo``, ``servers``, ``generate`` and
``bench``. Each ``add_*`` adds its command to ``metashift``'s parser: the runtime finds them through
the ``metashift.commands`` entry points this distribution declares (it never imports the lab).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from metashift.stores.aio import run_loop

EXIT_USER_ERROR = 2


def _run(coro: Coroutine[Any, Any, int]) -> int:
    return run_loop(coro)


# ---- demo ---------------------------------------------------------------------------------------


async def _demo(args: argparse.Namespace) -> int:
    from metashift_lab.demo import run_demo

    return await run_demo(args)


def add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``metashift demo``."""
    p = sub.add_parser("demo", help="start local ZooKeeper and etcd and show metashift at work")
    p.add_argument("--topics", type=_positive_int, default=2000, help="size of the sample tree (default 2000)")
    p.set_defaults(handler=lambda a: _run(_demo(a)))


def _whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


_positive_int = _whole_number(1)
_count = _whole_number(0)


# ---- sandbox ------------------------------------------------------------------------------------


async def _sandbox(args: argparse.Namespace) -> int:
    from metashift_lab.sandbox import Options, run_sandbox

    if args.pulsar and args.client_protocol is not None:
        print("metashift: error: --client-protocol is for the simulated clients; with --pulsar, Pulsar's own "
              "brokers and bookie speak ZooKeeper's protocol to their agents", file=sys.stderr)
        return EXIT_USER_ERROR
    source, target = args.source or "zk", args.target or ("zk" if args.source == "etcd" else "etcd")
    if source == target:
        print(f"metashift: error: --source and --target are both {source}: a migration needs another store",
              file=sys.stderr)
        return EXIT_USER_ERROR
    if not args.pulsar and (args.adopt or args.forget or args.pulsar_version):
        print("metashift: error: --adopt, --forget and --pulsar-version are for a real Pulsar cluster (--pulsar)",
              file=sys.stderr)
        return EXIT_USER_ERROR
    if args.pulsar and args.replicas > 1:
        print("metashift: error: --replicas is for the simulated clients: with --pulsar the stores are single "
              "servers", file=sys.stderr)
        return EXIT_USER_ERROR
    # a Pulsar cluster on etcd or Oxia is born there, then adopts its agents
    adopt = args.adopt or (args.pulsar and source != "zk")
    if args.forget and not adopt:
        print("metashift: error: --forget needs --adopt (a member left on the store in the rolling restart)",
              file=sys.stderr)
        return EXIT_USER_ERROR
    return await run_sandbox(
        Options(
            topics=args.topics, brokers=args.brokers, bookies=args.bookies, clients_per_agent=args.clients,
            json=args.json, kill_agent_at=args.kill_agent_at, kill_agent=args.kill_agent, keep=args.keep,
            spark_master=args.spark_master, beside_copy=args.beside_copy,
            pulsar=args.pulsar, abort_first=args.abort_first, client_protocol=args.client_protocol or "grpc",
            source=source, target=target, adopt=adopt, forget=args.forget, pulsar_version=args.pulsar_version,
            replicas=args.replicas,
        )
    )


def add_sandbox(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``metashift sandbox``."""
    from metashift_lab.pulsar_cluster.release import RELEASES  # names only (no JVM, no client)

    p = sub.add_parser(
        "sandbox",
        help="a whole migration on this machine: local stores, agent processes, clients writing all along",
        description="Start a local source and target store (ZooKeeper -> etcd unless --source/--target say "
        "otherwise: zk, etcd, oxia), a Pulsar-shaped tree on the source, one metashift agent process per "
        "broker and bookie with clients writing through them, migrate while they write, then check every "
        "acknowledged write and verify the tree. Exit 0 when the migration completed with nothing lost and "
        "verification passed.",
    )
    p.add_argument("--topics", type=_positive_int, default=2000, help="Pulsar tree size (default 2000, ~10k nodes)")
    p.add_argument("--brokers", type=_positive_int, default=3, help="broker agents (default 3)")
    p.add_argument("--bookies", type=_positive_int, default=2, help="bookie agents (default 2)")
    p.add_argument("--clients", type=_positive_int, default=2, help="writing clients per agent (default 2)")
    p.add_argument("--client-protocol", choices=["grpc", "zookeeper"],
                   help="how the clients reach their agents: grpc (metashift.client, the default) or zookeeper "
                   "(ZooKeeper's protocol on each agent's ZooKeeper front, as stock brokers and bookies do)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--spark-master", metavar="M", help="Spark master of the coordinator's copy (default local[*])")
    p.add_argument("--keep", action="store_true", help="keep the work directory (agent logs and configs)")
    p.add_argument("--beside-copy", action="store_true",
                   help="then time `metashift copy --verify` of the same tree into a fresh target, alone, and report "
                   "the migration's time (start to COMPLETED) against it (migration_vs_copy)")
    p.add_argument("--pulsar", action="store_true",
                   help="a real Apache Pulsar cluster (the release `make setup` fetched: a bookie, two brokers, "
                   "producers and consumers) instead of simulated clients; then Pulsar restarted on etcd directly")
    p.add_argument("--source", choices=["zk", "etcd", "oxia"],
                   help="the store the cluster starts on (default zk); with --pulsar and etcd, Pulsar starts on "
                   "etcd directly and adopts its agents by a rolling restart")
    p.add_argument("--target", choices=["zk", "etcd", "oxia"],
                   help="the store it migrates into (default etcd, or zk from etcd)")
    p.add_argument("--pulsar-version", choices=list(RELEASES), metavar="VERSION",
                   help=f"with --pulsar: the release to run, one of {', '.join(RELEASES)} (default {RELEASES[0]}, "
                   "the 4.0 LTS line; 4.2.4 ships PIP-454's own migration code, kept from acting)")
    p.add_argument("--adopt", action="store_true",
                   help="with --pulsar: start Pulsar on the source store directly, then adopt the agents by a "
                   "rolling restart (the bookie, then each broker), `migrate check` before and after each step")
    p.add_argument("--forget", choices=["broker-1", "broker-2", "bookie-1"], metavar="NAME",
                   help="with --adopt: leave NAME on the store at first: the check names it, `migrate start` "
                   "refuses, `migrate start --force` fails; then it is restarted onto its agent")
    p.add_argument("--replicas", type=_odd_replicas, default=1, metavar="N",
                   help="members of each store: 1 (default: single servers) or an odd number above (a ZooKeeper "
                   "ensemble, an etcd cluster, an Oxia cluster of a coordinator and N data servers, replication "
                   "factor 3, 3 shards)")
    # for tests, with --pulsar: a first migration aborted while it copies, then the migration
    p.add_argument("--abort-first", action="store_true", help=argparse.SUPPRESS)
    # for tests: SIGKILL the coordinator's agent process as soon as the migration is in PHASE
    p.add_argument("--kill-agent-at", choices=["SYNCING", "PREPARATION", "COPYING"], help=argparse.SUPPRESS)
    # which one: the coordinator's agent (default) or another, a participant only
    p.add_argument("--kill-agent", choices=["coordinator", "participant"], default="coordinator",
                   help=argparse.SUPPRESS)
    p.set_defaults(handler=lambda a: _run(_sandbox(a)))


# ---- servers ------------------------------------------------------------------------------------


def _odd_replicas(text: str) -> int:
    """An argparse type: a store's number of members, a positive odd whole number (a quorum of an
    even number of members survives no more losses than one member fewer)."""
    value = _positive_int(text)
    if value % 2 == 0:
        raise argparse.ArgumentTypeError(f"must be odd (1, 3, 5, ...), not {value}")
    return value


def _servers(args: argparse.Namespace) -> int:
    import signal

    from metashift_lab.servers import ServerStartError

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # Installed before anything is printed: a caller may signal as soon as it reads the URLs. Both
    # set explicitly: a parent that ignores SIGINT (a background job) passes SIG_IGN on to us. A
    # handler, not a blocked mask, because children inherit masks but not handlers across exec.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    servers: list[Any] = []
    try:
        # in this (the main) thread, one after the other: a server dies with the thread that started it
        for name, server in _server_list(args.replicas):
            servers.append(server)
            server.start()
            where = server.directory if args.replicas > 1 else server.data_dir
            print(f"{name + ':':<10} {server.url}  (data {where})", flush=True)
        print("Ctrl-C stops " + ("both." if len(servers) == 2 else "them all."), flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    except ServerStartError as e:
        print(f"metashift: error: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for server in servers:
            server.cleanup()
    return 0


def _server_list(replicas: int) -> list[tuple[str, Any]]:
    """What ``metashift servers`` runs: a single ZooKeeper and etcd, or with ``replicas`` > 1 a
    ZooKeeper ensemble, an etcd cluster and (when the Oxia binary is there) an Oxia cluster."""
    from metashift_lab.servers import LocalEtcd, LocalZooKeeper, oxia_binary

    if replicas == 1:
        return [("zookeeper", LocalZooKeeper()), ("etcd", LocalEtcd())]
    from metashift_lab.replicated import EtcdCluster, OxiaCluster, ZooKeeperEnsemble

    out: list[tuple[str, Any]] = [("zookeeper", ZooKeeperEnsemble(replicas=replicas)),
                                  ("etcd", EtcdCluster(replicas=replicas))]  # fmt: skip
    if oxia_binary() is not None:
        out.append(("oxia", OxiaCluster(replicas=replicas)))
    else:
        print("no Oxia binary (make setup unpacks it into .cache/oxia): no Oxia cluster", file=sys.stderr)
    return out


def add_servers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``metashift servers``."""
    p = sub.add_parser("servers", help="run a local ZooKeeper and etcd (or replicated stores) until Ctrl-C",
                       description="Run a local ZooKeeper and etcd until Ctrl-C or SIGTERM; with --replicas N "
                       "(odd, above 1) a ZooKeeper ensemble, an etcd cluster and an Oxia cluster (a coordinator "
                       "and N data servers, replication factor 3, 3 shards) of N members each, every URL naming "
                       "every member.")  # fmt: skip
    p.add_argument("--replicas", type=_odd_replicas, default=1, metavar="N",
                   help="members of each store: 1 (default: a single ZooKeeper and etcd) or an odd number above")
    p.set_defaults(handler=_servers)


# ---- sample data, copy, verify, benchmark -------------------------------------------------------


async def _generate(args: argparse.Namespace) -> int:
    import json
    import signal

    from metashift.stores import open_store
    from metashift_lab.sample_tree import generate

    store = await open_store(args.target, watch=False)
    try:
        tree = await generate(
            store, args.topics, args.seed, ephemerals=not args.no_ephemerals, ledger_ids=args.ledger_ids,
            producer_names=args.producer_names,
        )
        if args.json:
            out = {k: v for k, v in vars(tree).items() if k != "ephemeral_paths"}
            print(json.dumps(out, indent=2, sort_keys=True), flush=True)
        else:
            print(tree.text(), flush=True)
        if args.hold and tree.ephemeral:
            print(f"holding {tree.ephemeral} ephemerals until Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
    finally:
        await store.close()
    return 0


def add_generate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``metashift generate``."""
    p = sub.add_parser("generate", help="write a Pulsar + BookKeeper shaped sample tree into a store")
    p.add_argument("--target", required=True, metavar="URL", help="store to write into (zk://... or etcd://...)")
    p.add_argument("--topics", type=_positive_int, required=True, help="number of topics (about 6 nodes each)")
    p.add_argument("--seed", type=int, default=0, help="the same seed gives the same tree (default 0)")
    p.add_argument("--hold", action="store_true", help="keep the ephemerals alive until Ctrl-C or SIGTERM")
    p.add_argument("--no-ephemerals", action="store_true", help="write no ephemerals")
    p.add_argument("--ledger-ids", type=_ledger_ids, default=0, metavar="N",
                   help="the ledger ids BookKeeper's generator has handed out (/ledgers/idgen's counter; "
                   "ZooKeeper: ~70k ids/s, etcd: ~8k ids/s)")
    p.add_argument("--producer-names", type=_count, default=0, metavar="N",
                   help="the ids Pulsar's producer-name counter (/counters/producer-name) has handed out")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(handler=lambda a: _run(_generate(a)))


def _ledger_ids(text: str) -> int:
    from metashift_lab.sample_tree import MAX_SHORT_LEDGER_IDS

    value = _count(text)
    if value >= MAX_SHORT_LEDGER_IDS:
        raise argparse.ArgumentTypeError(f"must be below {MAX_SHORT_LEDGER_IDS} (BookKeeper's 31-bit ids), not {value}")
    return value


def _bench(args: argparse.Namespace) -> int:
    from metashift_lab.benchmarks.copy import main as copy_bench

    return copy_bench(args.bench_args, prog="metashift bench copy")


def add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``metashift bench``."""
    p = sub.add_parser("bench", help="benchmarks: they print figures")
    which = p.add_subparsers(dest="bench", metavar="WHICH")
    which.required = True
    # its flags (--topics N, --seed S, --baseline-seconds T, --spark-master M) and its --help are the
    # benchmark's own parser's (metashift_lab.benchmarks.copy): main() passes on what it does not know
    c = which.add_parser(
        "copy", help="copy and verify rates against raw store rates and a kazoo baseline", add_help=False
    )
    c.set_defaults(handler=_bench, bench_args=[], passes_unknown=True)
