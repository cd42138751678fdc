"""A real Apache Pulsar cluster on loopback, each process beside its own metashift agent.

ZooKeeper and etcd (``metashift_lab.servers``), one ``metashift agent --zk-listen`` process per
Pulsar process, the cluster's metadata initialized through an agent
(``PulsarClusterMetadataSetup``), a BookKeeper bookie and two brokers of the stock Pulsar release
that ``make setup`` fetched from Maven Central (``.cache/pulsar``); producers and consumers of the
Python ``pulsar-client``. Used by ``metashift sandbox --pulsar`` and by the Pulsar tests.

- ``release``: where the release's jars are, its version, how to run its JVMs
- ``configs``: broker.conf, bookkeeper.conf, log4j2 (small: two cores)
- ``processes``: one Pulsar JVM as a child process
- ``cluster``: the whole cluster, on the agents or on Pulsar's own etcd URLs
- ``access``: what a member carries besides its URL, by where it reaches its metadata (JVM
  properties, broker.conf keys, the bookie URI's options), and stores a caller made
- ``secured_stores``: a ZooKeeper with TLS and SASL DIGEST-MD5, an Oxia with TLS and OIDC tokens,
  and the members' settings for each (``tests/test_pulsar_secured.py``)
- ``replicated``: a ZooKeeper ensemble and an Oxia cluster of three, a store's leader killed in a
  migration's phase, each migration's freeze; what Pulsar's own URLs of them take
  (``tests/test_pulsar_replicated.py``)
- ``admin``: Pulsar's admin REST API, and ``pulsar-admin`` from the release
- ``traffic``: producers and consumers that count every message
- ``evidence``: what the brokers' logs and metrics say (ledger ids, sessions, metadata errors)
- ``pip454_run``: Pulsar 4.2's own migration (PIP-454) started and followed as an operator does
- ``side_by_side``: PIP-454's migration beside metashift's on the same cluster and traffic
  (``bench/pip454_vs_metashift.py``); ``target_check``: the target against the source after one
"""

from .cluster import PulsarCluster, PulsarStartError
from .release import PulsarNotInstalled, PulsarRelease, find_release

__all__ = ["PulsarCluster", "PulsarNotInstalled", "PulsarRelease", "PulsarStartError", "find_release"]
