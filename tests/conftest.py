# first: gRPC reads its environment once, when it loads. Fault tests restart servers (fork +
# exec) while gRPC threads run in this process (aetcd, in-process agents); with gRPC's fork
# handlers on, a restarted etcd died of SIGSEGV.
from metashift import grpc_env

grpc_env.configure()

pytest_plugins = ["tests.harness", "tests.zkfront", "tests.zkjava", "tests.agent_processes", "tests.copy_support"]
