"""metashift's lab: what develops and proves metashift, never what a node runs. The sandbox
(``sandbox``: a whole migration on one machine), a stock Pulsar cluster beside the agents
(``pulsar_cluster``), the benchmarks (``benchmarks``), local ZooKeeper, etcd and Oxia servers
(``servers``), Pulsar-shaped sample trees (``sample_tree``), the linearizability checker
(``linearizability``), and the ``metashift`` commands that run them (``commands``: sandbox, demo,
servers, generate, bench). It imports metashift; metashift never imports it."""

from pathlib import Path

#: The checkout the lab runs from (``lab/metashift_lab/`` is two levels below it): where
#: ``make setup`` keeps what it fetched, in ``.cache/`` (Oxia's server, the Pulsar releases).
CHECKOUT = Path(__file__).resolve().parent.parent.parent
CACHE = CHECKOUT / ".cache"

