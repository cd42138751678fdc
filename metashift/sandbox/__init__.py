"""``metashift sandbox``: a whole zk -> etcd migration on this machine, with agent processes and
clients writing all along (``run``: the orchestration; ``agents``, ``clients``, ``report``)."""

from .run import Options, run_sandbox

__all__ = ["Options", "run_sandbox"]
