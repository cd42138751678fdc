"""``metashift sandbox``: a whole zk -> etcd migration on this machine, with agent processes and
clients writing all along (``command``: the command; ``options``: its settings; ``run``: the
orchestration; ``agents``, ``clients``, ``report``)."""

from .command import run_sandbox
from .options import Options

__all__ = ["Options", "run_sandbox"]
