"""The whole cluster: the source and target stores, one agent per Pulsar process, a bookie and
brokers that talk ZooKeeper's protocol to their agents, or the source store directly (a cluster
born there, which adopts its agents by a rolling restart); later the same bookie and brokers
restarted on Pulsar's own URLs of the target with no agent. Everything goes at ``cleanup``,
whatever happened before."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import time
import tomllib
from collections.abc import Callable, Collection
from pathlib import Path
from urllib.parse import urlencode

from metashift.stores import parse_url
from metashift_lab.agents import RESTART_DOWN_S, AgentProcess, AgentRestart, start_agents, stop_agents
from metashift_lab.replicated import EtcdCluster, OxiaCluster, ZooKeeperEnsemble
from metashift_lab.secured.oxia import SecuredOxia
from metashift_lab.servers import LocalEtcd, LocalOxia, LocalZooKeeper, free_port

from . import configs
from .access import AGENT, MemberAccess, Server, StoreSetup
from .processes import JavaProcess, ProcessStartError
from .release import PulsarRelease
from .traffic import log_client_to

#: Generous bounds: five JVMs starting on a loaded two-core machine are slow. They only turn a
#: hang into an error.
BOOKIE_READY_S = 240.0
BROKER_READY_S = 300.0
SETUP_S = 240.0
#: Seconds a store call (and a connection to a store) may take, in the agents' and the migration's
#: store URLs: a two-core machine loaded by five JVMs and a Spark copy answers slowly at times, and
#: the copy gives up on a store that does not answer within it.
STORE_TIMEOUT_S = 30.0
BOOKIE_READY = r"Started component bookie-server"
#: How the bookie reaches its metadata: Pulsar's driver (``metadata-store:zk:...``) or BookKeeper's
#: own ZooKeeper driver (``zk+hierarchical://...``).
BOOKIE_DRIVERS = ("metadata-store", "zk+hierarchical")
BROKER_READY = r"messaging service is ready"


class PulsarStartError(RuntimeError):
    """A part of the cluster did not start."""

    pass


def _wait_port(port: int, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise PulsarStartError(f"nothing listens on 127.0.0.1:{port} after {within:g}s") from None
            time.sleep(0.1)


#: The stores a cluster can live on, by metashift's URL scheme.
STORE_KINDS = ("zk", "etcd", "oxia")
#: Where a Pulsar process reaches its metadata: through its agent's ZooKeeper front (``AGENT``), or
#: a store directly (one of ``STORE_KINDS``, with Pulsar's own URL of it).
STORE_NAMES = {"zk": "ZooKeeper", "etcd": "etcd", "oxia": "Oxia"}

LocalServer = LocalZooKeeper | LocalEtcd | LocalOxia
__all__ = ["AGENT", "PulsarCluster", "PulsarStartError"]


class PulsarCluster:
    """A bookie and ``brokers`` brokers, each beside its own ``metashift agent --zk-listen``, on a
    ``source`` store to be migrated into ``target``. ``born_direct``: the processes start on the
    source store's own URL (as a cluster that never had agents), to adopt them later
    (``restart_member``); with ``agents=False`` as well, no agent process is started at all (a
    cluster that only Pulsar's own migration moves). ``broker_settings``: more keys of every
    broker.conf; ``candidates``: the members whose agents stand for coordinator (all by default);
    ``stores``: stores the caller made (secured ones: ``access.StoreSetup``) instead of local plain
    ones, with what the agents and the members need to reach them."""

    def __init__(
        self, work_dir: Path, release: PulsarRelease, *, brokers: int = 2, hold_timeout: float = 300.0,
        prepare_timeout: float = 60.0, spark_master: str | None = None, say: Callable[[str], None] = print,
        bookie_driver: str = "metadata-store", source: str = "zk", target: str = "etcd", born_direct: bool = False,
        agents: bool = True, broker_settings: dict[str, object] | None = None,
        candidates: Collection[str] | None = None, stores: StoreSetup | None = None,
    ) -> None:  # fmt: skip
        if not agents and not born_direct:
            raise ValueError("a cluster without agents must be born on its source store (born_direct)")
        if bookie_driver not in BOOKIE_DRIVERS:
            raise ValueError(f"bookie_driver must be one of {BOOKIE_DRIVERS}, not {bookie_driver!r}")
        for kind in (source, target):
            if kind not in STORE_KINDS:
                raise ValueError(f"store kind must be one of {STORE_KINDS}, not {kind!r}")
        if source == target:
            raise ValueError(f"the source and the target are both {source}")
        self.bookie_driver = bookie_driver
        self.work_dir = work_dir
        log_client_to(str(work_dir / "pulsar-client.log"))  # the producers' and consumers' own log
        self.release = release
        self.say = say
        self.source, self.target = source, target
        self.stores = stores
        self.servers: dict[str, Server] = {
            kind: stores.servers[kind] if stores is not None and kind in stores.servers else _server(kind, work_dir)
            for kind in (source, target)
        }
        self.pip454_oxia: LocalOxia | None = None
        """A release with PIP-454's own migration and no Oxia in the cluster: an Oxia of its own for
        ``metadata-migration start`` to aim at (it never answers when it cannot reach one)."""
        if release.ships_pip454 and "oxia" not in self.servers:
            self.pip454_oxia = LocalOxia(work_dir / "oxia-pip454")
        self.log4j = work_dir / "log4j2.properties"
        self.broker_ports = [configs.BrokerPorts(free_port(), free_port()) for _ in range(brokers)]
        self.bookie_port = free_port()
        self.names = [f"broker-{i}" for i in range(1, brokers + 1)] + ["bookie-1"]
        self.agents = [
            AgentProcess(
                name, "bookie" if name.startswith("bookie") else "broker", work_dir / "agents", "",
                hold_timeout=hold_timeout, prepare_timeout=prepare_timeout, spark_master=spark_master,
                zk_listen=f"127.0.0.1:{free_port()}",
                coordinator_enabled=candidates is None or name in candidates,
                zookeeper_settings=dict(stores.zookeeper_settings) if stores is not None else {},
                target_settings=dict(stores.target_settings) if stores is not None else {},
            )
            for name in self.names
        ]  # fmt: skip
        self.broker_settings = dict(broker_settings or {})
        self.with_agents = agents
        self.where = {name: source if born_direct else AGENT for name in self.names}
        """Where each Pulsar process reaches its metadata now (``AGENT`` or a store kind)."""
        self.processes: dict[str, JavaProcess] = {}
        """The running incarnation of each Pulsar process."""
        self.history: list[JavaProcess] = []
        """Every incarnation started, in order (their logs hold the ledger ids they handed out)."""
        self.confs: dict[str, Path] = {}
        """The config file of each Pulsar process's running incarnation."""

    # ---- addresses ------------------------------------------------------------------------------

    def store_url(self, kind: str) -> str:
        """metashift's URL of the store ``kind``."""
        url = self.stores.url(kind) if self.stores is not None and kind in self.stores.servers else self._shown(kind)
        return f"{url}{'&' if '?' in url else '?'}timeout={STORE_TIMEOUT_S:g}"

    def _shown(self, kind: str) -> str:
        """The server's own URL of the store ``kind`` (no credentials)."""
        server = self.servers[kind]
        return server.url() if isinstance(server, SecuredOxia) else server.url

    def access(self, name: str) -> MemberAccess:
        """What the process ``name`` carries besides its URL where it reaches its metadata now."""
        found = self.stores.members.get(self.where[name]) if self.stores is not None else None
        return found or MemberAccess()

    def native_url(self, kind: str) -> str:
        """Pulsar's own URL of the store ``kind`` (``metadataStoreUrl``)."""
        server = self.servers[kind]
        if isinstance(server, LocalZooKeeper | ZooKeeperEnsemble):
            return f"zk:{server.hosts}"
        if isinstance(server, OxiaCluster):
            # Pulsar's Oxia client takes one address, not a list (pulsar_cluster.replicated's doc)
            return f"oxia://{pulsar_oxia_address(server)}"
        if isinstance(server, EtcdCluster):
            return f"etcd:{','.join(f'http://{h}' for h in server.hosts.split(','))}"
        if isinstance(server, LocalOxia | SecuredOxia):
            return f"oxia://{server.address}"  # namespace "default", as Pulsar takes it when absent
        return f"etcd:{server.endpoint}"

    @property
    def source_url(self) -> str:
        return self.store_url(self.source)

    @property
    def target_url(self) -> str:
        return self.store_url(self.target)

    def agent(self, name: str) -> AgentProcess:
        return next(a for a in self.agents if a.node_id == name)

    def zk_address(self, name: str) -> str:
        """``127.0.0.1:PORT``: the ZooKeeper port of the agent beside ``name``."""
        address = self.agent(name).zk_listen
        assert address is not None
        return address

    @property
    def service_urls(self) -> list[str]:
        return [p.service_url for p in self.broker_ports]

    @property
    def web_urls(self) -> list[str]:
        return [p.web_url for p in self.broker_ports]

    def metadata_url(self, name: str) -> str:
        """Pulsar's metadata store URL for the process ``name``: its agent, or a store directly."""
        where = self.where[name]
        return f"zk:{self.zk_address(name)}" if where == AGENT else self.native_url(where)

    def bookie_metadata_uri(self) -> str:
        """The bookie's ``metadataServiceUri``: Pulsar's metadata-store driver (``/ledgers`` is not
        appended: with Pulsar 4.0 it is a ZooKeeper chroot, below which BookKeeper looks for its own
        ``/ledgers``; docs/operator-guide.md, "Pulsar's URLs and metashift's"), or, through its agent, BookKeeper's own
        ZooKeeper driver (``zk+hierarchical://.../ledgers``) if asked."""
        if self.bookie_driver == "zk+hierarchical" and self.where["bookie-1"] == AGENT:
            return f"zk+hierarchical://{self.zk_address('bookie-1')}/ledgers"
        options = self.access("bookie-1").bookie_uri_options
        query = f"?{urlencode(options, safe='/')}" if options else ""
        return f"metadata-store:{self.metadata_url('bookie-1')}{query}"

    @property
    def brokers(self) -> list[JavaProcess]:
        return [self.processes[n] for n in self.names if n.startswith("broker") and n in self.processes]

    @property
    def bookie(self) -> JavaProcess | None:
        return self.processes.get("bookie-1")

    @property
    def pulsar_processes(self) -> list[JavaProcess]:
        return [*self.brokers, *([self.bookie] if self.bookie else [])]

    def broker_logs(self) -> list[str]:
        """The logs of every broker incarnation (each names the ledger ids it handed out)."""
        return [p.log_text() for p in self.history if p.name.startswith("broker")]

    # ---- start ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Servers, agents, cluster metadata (through broker-1's agent, or on the source directly),
        bookie, brokers."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log4j.write_text(configs.LOG4J2)
        # in the caller's (main) thread: the servers die with the thread that started them
        for server in [*self.servers.values(), *([self.pip454_oxia] if self.pip454_oxia else [])]:
            server.start()
        self.say(f"{STORE_NAMES[self.source]} (source) at {self._shown(self.source)}, "
                 f"{STORE_NAMES[self.target]} (target) at {self._shown(self.target)}; "
                 f"Pulsar {self.release.version}")  # fmt: skip
        if self.with_agents:
            await self._start_agents()
        await self._initialize_metadata()
        await self._start_pulsar()

    async def _start_agents(self) -> None:
        for agent in self.agents:
            agent.source_url = self.source_url
        self.agents[0].work_dir.mkdir(parents=True, exist_ok=True)
        await start_agents(self.agents)
        for agent in self.agents:
            _wait_port(int(self.zk_address(agent.node_id).rsplit(":", 1)[1]), 60.0)
        self.say("agents serving ZooKeeper's protocol: " + ", ".join(
            f"{a.node_id} {a.zk_listen} (pid {a.pid})" for a in self.agents))  # fmt: skip

    async def _initialize_metadata(self) -> None:
        url = self.metadata_url("broker-1")
        ports = self.broker_ports[0]
        tool = JavaProcess(
            "cluster-metadata-setup",
            [*self.release.java("org.apache.pulsar.PulsarClusterMetadataSetup", heap_mb=192, log_config=self.log4j,
                                properties=dict(self.access("broker-1").jvm_properties)),
             "--cluster", configs.CLUSTER_NAME, "--metadata-store", url, "--configuration-metadata-store", url,
             "--web-service-url", ports.web_url, "--broker-service-url", ports.service_url],
            self.work_dir / "cluster-metadata-setup.log", self.work_dir,
        )  # fmt: skip
        code = await tool.run_to_end(SETUP_S)
        if code != 0:
            raise PulsarStartError(f"PulsarClusterMetadataSetup exited with {code}:\n{tool.log_tail()}")
        self.say(f"cluster metadata initialized ({url})")

    def _process(self, name: str) -> JavaProcess:
        """A new incarnation of the Pulsar process ``name`` on ``metadata_url(name)`` (its config
        and log named after where it reaches its metadata and the how-manyth start it is)."""
        n = sum(1 for p in self.history if p.name == name) + 1
        tag = f"{self.where[name]}-{n}"
        home = self.work_dir / name
        conf = self.work_dir / f"{name}-{tag}.conf"
        access = self.access(name)  # what it carries where it reaches its metadata (none: nothing)
        properties = dict(access.jvm_properties)
        if name.startswith("bookie"):
            conf.write_text(configs.bookie_conf(self.bookie_metadata_uri(), self.bookie_port, home))
            command = [*self.release.java("org.apache.bookkeeper.server.Main", heap_mb=160, direct_mb=160,
                                          log_config=self.log4j, properties=properties),
                       "--conf", str(conf)]  # fmt: skip
        else:
            ports = self.broker_ports[int(name.rsplit("-", 1)[1]) - 1]
            settings = {**self.broker_settings, **access.broker_settings}
            conf.write_text(configs.broker_conf(self.metadata_url(name), ports, home, settings))
            command = [*self.release.java("org.apache.pulsar.PulsarBrokerStarter", heap_mb=256, direct_mb=192,
                                          log_config=self.log4j, properties=properties),
                       "--broker-conf", str(conf)]  # fmt: skip
        process = JavaProcess(name, command, self.work_dir / f"{name}-{tag}.log", home)
        self.confs[name] = conf
        self.history.append(process)
        self.processes[name] = process
        return process

    async def _start_pulsar(self) -> None:
        """The bookie first (brokers need one to write), then the brokers together."""
        bookie = self._process("bookie-1")
        await bookie.start()
        self.say(f"bookie-1 started (pid {bookie.pid}); waiting for it to serve ...")
        await self._ready(bookie, BOOKIE_READY, BOOKIE_READY_S)
        brokers = [self._process(n) for n in self.names if n.startswith("broker")]
        for broker in brokers:
            await broker.start()
        await asyncio.gather(*(self._ready(b, BROKER_READY, BROKER_READY_S) for b in brokers))
        self.say(f"bookie and {len(brokers)} brokers ready: "
                 + ", ".join(f"{p.name} (pid {p.pid}) on {self._where_text(p.name)}" for p in self.pulsar_processes))

    def _where_text(self, name: str) -> str:
        where = self.where[name]
        return "its agent" if where == AGENT else f"{STORE_NAMES[where]} directly"

    async def _ready(self, process: JavaProcess, pattern: str, within: float) -> None:
        try:
            await process.wait_for_line(pattern, within)
        except ProcessStartError as e:
            raise PulsarStartError(str(e)) from None

    # ---- restarts -------------------------------------------------------------------------------

    async def restart_member(self, name: str, where: str) -> None:
        """A rolling restart's step: stop the process ``name`` (SIGTERM: it hands its bundles over
        and closes its session) and start it again reaching its metadata ``where`` (``AGENT``, or
        a store kind directly)."""
        if where != AGENT and where not in self.servers:
            raise ValueError(f"no {where} store in this cluster")
        if where == AGENT and not self.with_agents:
            raise ValueError("this cluster has no agents")
        old = self.processes.get(name)
        if old is not None:
            await old.stop()
        self.where[name] = where
        process = self._process(name)
        await process.start()
        marker, within = (BOOKIE_READY, BOOKIE_READY_S) if name.startswith("bookie") else (BROKER_READY,
                                                                                             BROKER_READY_S)
        await self._ready(process, marker, within)
        self.say(f"{name} restarted on {self._where_text(name)} (pid {process.pid})")

    async def restart_agent(self, name: str, kind: str, down: float = RESTART_DOWN_S) -> AgentRestart:
        """Restart the agent beside ``name`` as systemd would (``AgentProcess.restart``: ``sigterm``,
        or ``sigkill`` and a start ``down`` seconds later), with the same config and state
        directory; the Pulsar process is left alone."""
        agent = self.agent(name)
        done = await agent.restart(kind, down)
        self.say(f"agent of {name} restarted ({kind}): pid {done.old_pid} -> {done.new_pid}, serving again "
                 f"{done.away_s:.1f} s after the signal")  # fmt: skip
        return done

    def member_session_timeout(self, name: str) -> float:
        """Seconds: the ZooKeeper session timeout the Pulsar process ``name`` asks of its metadata
        store, read from the config file its running incarnation was started with (a broker's
        ``metadataStoreSessionTimeoutMillis``, the bookie's ``zkTimeout``)."""
        values = dict(line.split("=", 1) for line in self.confs[name].read_text().splitlines() if "=" in line)
        key = "zkTimeout" if name.startswith("bookie") else "metadataStoreSessionTimeoutMillis"
        return int(values[key]) / 1000.0

    def agent_store_session_timeout(self, name: str) -> float:
        """Seconds: the session timeout of the agent beside ``name`` on its store (its store session,
        etcd lease or Oxia session holds its members' ephemerals), read from the config file it runs
        with (its ``[source] url``'s ``session_timeout``), and of the migration's target."""
        with self.agent(name).config_path.open("rb") as f:
            url = tomllib.load(f)["source"]["url"]
        return max(parse_url(url).session_timeout, parse_url(self.target_url).session_timeout)

    def rolling_order(self) -> list[str]:
        """The order of a rolling restart: the bookie first, then the brokers one by one."""
        return ["bookie-1", *[n for n in self.names if n.startswith("broker")]]

    async def stop_pulsar(self) -> None:
        """Stop the brokers, then the bookie (SIGTERM: they shut down in order)."""
        await asyncio.gather(*(b.stop() for b in self.brokers), return_exceptions=True)
        if self.bookie is not None:
            await self.bookie.stop()

    async def restart_native(self, kind: str | None = None) -> None:
        """Stop the brokers, the bookie and every agent; start the bookie and the brokers again on
        Pulsar's own URLs of the store ``kind`` (the target by default), no agent."""
        kind = kind or self.target
        await self.stop_pulsar()
        await stop_agents(self.agents)
        self.say(f"brokers, bookie and agents stopped; starting the bookie and brokers on {STORE_NAMES[kind]} "
                 "directly ...")  # fmt: skip
        for name in self.names:
            self.where[name] = kind
        await self._start_pulsar()

    # ---- cleanup --------------------------------------------------------------------------------

    async def cleanup(self, keep: bool = False) -> None:
        """Stop every process and server; remove the work directory unless ``keep``. Never raises."""
        with contextlib.suppress(Exception):
            await self.stop_pulsar()
        with contextlib.suppress(Exception):
            await stop_agents(self.agents)
        for server in [*self.servers.values(), *([self.pip454_oxia] if self.pip454_oxia else [])]:
            with contextlib.suppress(Exception):
                server.cleanup()
        if not keep:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def pulsar_oxia_address(cluster: OxiaCluster) -> str:
    """The one ``host:port`` of an Oxia cluster Pulsar's Oxia client takes (``oxia://`` names a
    single bootstrap address, not a list: ``pulsar_cluster.replicated``'s doc): the first data
    server that runs."""
    member = next((m for m in cluster.members if m.running), cluster.members[0])
    return member.public


def _server(kind: str, work_dir: Path) -> LocalServer:
    """A local server of the store ``kind`` with its data in ``work_dir``."""
    if kind == "zk":
        return LocalZooKeeper(work_dir / "zookeeper")
    if kind == "oxia":
        return LocalOxia(work_dir / "oxia")
    return LocalEtcd(work_dir / "etcd")
