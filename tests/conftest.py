# first: gRPC reads its environment once, when it loads. Fault tests restart servers (fork +
# exec) while gRPC threads run in this process (aetcd, in-process agents); with gRPC's fork
# handlers on, a restarted etcd died of SIGSEGV.
from metashift import grpc_env

grpc_env.configure()

import os  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402  (after the gRPC environment)

# The agent processes a test starts keep their members' sessions in a state dir (default
# /run/metashift, the machine's): this test process's own (each xdist worker's: they inherit the
# controller's environment), so that agents of concurrent tests with one node id never share a
# state file. The lab's agents name a dir of their own on the command line, which wins.
os.environ["METASHIFT_SESSION_STATE_DIR"] = tempfile.mkdtemp(
    prefix=f"ms-state-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")

pytest_plugins = ["tests.harness", "tests.zkfront", "tests.zkjava", "tests.agent_processes", "tests.copy_support",
                  "tests.replicated_stores"]


#: Test modules whose tests take minutes (a stock Pulsar cluster, a Spark standalone cluster): run
#: first, so that the other worker packs the short tests beside them instead of one of them being
#: the last thing the suite waits for.
_LONG_MODULES = ("test_pulsar_", "test_copy_cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: 0 if item.path.name.startswith(_LONG_MODULES) else 1)
