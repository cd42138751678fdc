"""The configuration files of the cluster's Pulsar processes: small, so that a bookie and two
brokers fit on two cores beside ZooKeeper, etcd, the agents and Spark, and with ledgers that roll
over every few entries, so that ledger ids keep being handed out through a migration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CLUSTER_NAME = "metashift"
#: Entries per ledger before a managed ledger rolls over to a new one (a new ledger id).
ENTRIES_PER_LEDGER = 20
#: The ZooKeeper session timeout the brokers (``metadataStoreSessionTimeoutMillis``) and the bookie
#: (``zkTimeout``) ask of their metadata store: Pulsar's and BookKeeper's default, written out so
#: that a test reads it from the configs (the agent's front grants it: between 4 s and its
#: ``session.max_timeout``).
SESSION_TIMEOUT_MS = 30000
#: log4j2 for every JVM: milliseconds since the epoch first, so that log lines are placed exactly
#: against the migration's phases.
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{UNIX_MILLIS} %-5p [%t] %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
# a line per HTTP request and per Netty channel is noise here
logger.jetty.name = org.eclipse.jetty
logger.jetty.level = warn
logger.requestlog.name = org.apache.pulsar.broker.web.RequestLog
logger.requestlog.level = warn
"""


@dataclass(frozen=True)
class BrokerPorts:
    """The ports one broker serves."""

    service: int
    web: int

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.service}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web}"


def properties(values: dict[str, object]) -> str:
    """A Java properties file."""
    return "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in values.items())


def broker_conf(metadata_url: str, ports: BrokerPorts, work_dir: Path,
                extra: dict[str, object] | None = None) -> str:  # fmt: skip
    """broker.conf: ``metadata_url`` is Pulsar's own form (``zk:127.0.0.1:PORT`` for an agent's
    ZooKeeper port, ``etcd:http://127.0.0.1:PORT`` for etcd), for the cluster's metadata and the
    configuration metadata alike; BookKeeper's follows it (``metadata-store:`` + it). ``extra``:
    more keys, or other values of these."""
    return properties({
        "clusterName": CLUSTER_NAME,
        "metadataStoreUrl": metadata_url,
        "configurationMetadataStoreUrl": metadata_url,
        "metadataStoreSessionTimeoutMillis": SESSION_TIMEOUT_MS,
        "brokerServicePort": ports.service,
        "webServicePort": ports.web,
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
        # one bookie
        "managedLedgerDefaultEnsembleSize": 1,
        "managedLedgerDefaultWriteQuorum": 1,
        "managedLedgerDefaultAckQuorum": 1,
        # ledgers roll over often: new ledger ids all through a migration
        "managedLedgerMaxEntriesPerLedger": ENTRIES_PER_LEDGER,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        # bundles spread over both brokers
        "defaultNumberOfNamespaceBundles": 4,
        # topics stay until deleted on purpose
        "brokerDeleteInactiveTopicsEnabled": False,
        # two cores: no functions worker, no websocket proxy, few threads, small caches
        "functionsWorkerEnabled": False,
        "webSocketServiceEnabled": False,
        "numIOThreads": 2,
        "numHttpServerThreads": 6,
        "numExecutorThreadPoolSize": 2,
        "numOrderedExecutorThreads": 2,
        "numCacheExecutorThreadPoolSize": 1,
        "topicOrderedExecutorThreadNum": 2,
        "managedLedgerNumSchedulerThreads": 1,
        "bookkeeperClientNumWorkerThreads": 1,
        "bookkeeperClientNumIoThreads": 2,
        "bookkeeperNumberOfChannelsPerBookie": 2,
        "managedLedgerCacheSizeMB": 16,
        "brokerShutdownTimeoutMs": 15000,
        "narExtractionDirectory": work_dir / "nar",
        **(extra or {}),
    })


def bookie_conf(metadata_service_uri: str, port: int, data_dir: Path) -> str:
    """bookkeeper.conf of the one bookie: DbLedgerStorage with small caches, one thread each."""
    return properties({
        "bookiePort": port,
        "advertisedAddress": "127.0.0.1",
        "allowLoopback": True,
        "httpServerEnabled": False,
        "metadataServiceUri": metadata_service_uri,
        "zkTimeout": SESSION_TIMEOUT_MS,
        "journalDirectories": data_dir / "journal",
        "ledgerDirectories": data_dir / "ledgers",
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 16,
        "dbStorage_readAheadCacheMaxSizeMb": 16,
        "dbStorage_rocksDB_blockCacheSize": 8 * 1024 * 1024,
        "journalPreAllocSizeMB": 4,
        "journalWriteBufferSizeKB": 64,
        # a loopback test bookie: fsync would only slow every publish down
        "journalSyncData": False,
        "numAddWorkerThreads": 1,
        "numReadWorkerThreads": 1,
        "numJournalCallbackThreads": 1,
        "serverNumIOThreads": 2,
        "diskUsageThreshold": 0.99,
        "diskUsageWarnThreshold": 0.98,
        "statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider",
    })


def client_conf(web_url: str) -> str:
    """client.conf for ``pulsar-admin`` (it only needs the broker's admin REST API)."""
    return properties({"webServiceUrl": web_url + "/"})
