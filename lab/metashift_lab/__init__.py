"""metashift's lab: what develops and proves metashift, never what a node runs. The sandbox
(``sandbox``: a whole migration on one machine), a stock Pulsar cluster beside the agents
(``pulsar_cluster``), the benchmarks (``benchmarks``), local ZooKeeper, etcd and Oxia servers
(``servers``), Pulsar-shaped sample trees (``sample_tree``), the linearizability checker
(``linearizability``), and the ``metashift`` commands that run them (``commands``: sandbox, demo,
servers, generate, bench). It imports metashift; metashift never imports it."""
