"""gRPC's environment: what metashift's processes need of gRPC, each unless the user set it
already. gRPC reads it once, when it is first imported, so each entry point (``metashift.cli``,
the copy job's and Spark children's mains, the tests' conftest, the benchmarks' scripts) calls
``configure`` before anything loads grpc; importing metashift changes no process's environment."""

import os


def configure() -> None:
    """Set gRPC's environment for this process and those it starts (idempotent)."""
    # gRPC's fork handlers crash children forked while its threads run (local servers, Spark
    # launched from the agent); metashift never uses gRPC across a fork
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    # gRPC's core prints its own lines for every TLS handshake a secured store refuses ("I... Handshake
    # failed"), beside metashift's one-line error of the same: errors only
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    _experiments()


def _experiments() -> None:
    """gRPC's iomgr TCP client and listener instead of its EventEngine ones, unless the user chose.

    Why: on these 2-core VMs the EventEngine's four threads hand every message between them, and a
    thread wakeup costs 20-40 us here. Measured (``../shared/DESIGN.md``): a bare grpc.aio echo
    stream at 200 messages/s costs the server 336-402 us of CPU per message with them, 195-271
    without; the sandbox's writers cost their agents 830 us per write with them, 714 without, and
    their own process 490 against 400. Only on grpcio 1.85-1.89, where both are experiments that
    may be turned off (a later grpcio may drop them, and would log every unknown name it is
    given)."""
    if "GRPC_EXPERIMENTS" in os.environ:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(part) for part in version("grpcio").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return
    if (major, minor) >= (1, 85) and (major, minor) < (1, 90):
        os.environ["GRPC_EXPERIMENTS"] = "-event_engine_listener,-event_engine_client"

