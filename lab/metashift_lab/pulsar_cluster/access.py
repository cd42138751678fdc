"""How a Pulsar process reaches its metadata beyond the store's URL, by where it reaches it (a
store kind directly, or ``AGENT``: its agent's ZooKeeper front): its JVM's system properties
(ZooKeeper's client TLS, a JAAS file, Java's trust store), more ``broker.conf`` keys
(``metadataStoreConfigPath``) and options in the query of the bookie's ``metadata-store:`` URI
(``configFilePath``). And the stores a caller made itself (``StoreSetup``: secured ones), with
metashift's URL of each and the agents' settings for them.

Nothing here holds a secret: the properties and settings name files (a JAAS file, a password
file, a token file), so that no command line and no config the cluster writes carries one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from metashift_lab.replicated import EtcdCluster, OxiaCluster, ZooKeeperEnsemble
from metashift_lab.secured.oxia import SecuredOxia
from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper

#: Where a Pulsar process reaches its metadata through its agent's ZooKeeper front (the other
#: places are the store kinds).
AGENT = "agent"

#: A store server of the cluster (or a replicated store of three): started by
#: ``PulsarCluster.start``, gone at its ``cleanup``.
Server = LocalZooKeeper | LocalEtcd | LocalOxia | SecuredOxia | ZooKeeperEnsemble | EtcdCluster | OxiaCluster


@dataclass(frozen=True)
class MemberAccess:
    """What the brokers and the bookie (and the cluster's setup tool) carry, besides the URL, to
    reach their metadata in one place."""

    jvm_properties: Mapping[str, str] = field(default_factory=dict)
    """``-Dkey=value`` of every JVM."""
    broker_settings: Mapping[str, object] = field(default_factory=dict)
    """More keys of ``broker.conf``."""
    bookie_uri_options: Mapping[str, str] = field(default_factory=dict)
    """Options in the query of the bookie's ``metadata-store:`` URI (Pulsar 4.2's
    ``configFilePath``)."""


class StoreSetup(Protocol):
    """Stores the caller made (the cluster starts and removes them), with metashift's URL of each
    and what the agents and the members need to reach them."""

    @property
    def servers(self) -> Mapping[str, Server]:
        """By store kind (``zk``, ``oxia``, ...)."""
        ...

    @property
    def members(self) -> Mapping[str, MemberAccess]:
        """By where a member reaches its metadata (a store kind or ``AGENT``); none: nothing more."""
        ...

    @property
    def zookeeper_settings(self) -> Mapping[str, Any]:
        """More keys of every agent's ``[zookeeper]`` (``sasl_users_file``, ``require_sasl``)."""
        ...

    @property
    def target_settings(self) -> Mapping[str, Any]:
        """More keys of every agent's ``[target]`` (``tls``, ``ca``, ``token_file``, ...)."""
        ...

    def url(self, kind: str) -> str:
        """metashift's URL of the store ``kind`` (its credentials in files), once it serves."""
        ...
