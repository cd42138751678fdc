"""The whole cluster: ZooKeeper and etcd, one agent per Pulsar process, a bookie and brokers that
talk ZooKeeper's protocol to their agents; later the same bookie and brokers restarted on Pulsar's
own etcd URLs with no agent. Everything goes at ``cleanup``, whatever happened before."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from metashift.local_servers import LocalEtcd, LocalZooKeeper, free_port
from metashift.sandbox.agents import AgentProcess, start_agents, stop_agents

from . import configs
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


class PulsarCluster:
    """A bookie and ``brokers`` brokers, each beside its own ``metashift agent --zk-listen``."""

    def __init__(
        self, work_dir: Path, release: PulsarRelease, *, brokers: int = 2, hold_timeout: float = 300.0,
        prepare_timeout: float = 60.0, spark_master: str | None = None, say: Callable[[str], None] = print,
        bookie_driver: str = "metadata-store",
    ) -> None:  # fmt: skip
        if bookie_driver not in BOOKIE_DRIVERS:
            raise ValueError(f"bookie_driver must be one of {BOOKIE_DRIVERS}, not {bookie_driver!r}")
        self.bookie_driver = bookie_driver
        self.work_dir = work_dir
        log_client_to(str(work_dir / "pulsar-client.log"))  # the producers' and consumers' own log
        self.release = release
        self.say = say
        self.zk = LocalZooKeeper(work_dir / "zookeeper")
        self.etcd = LocalEtcd(work_dir / "etcd")
        self.log4j = work_dir / "log4j2.properties"
        self.broker_ports = [configs.BrokerPorts(free_port(), free_port()) for _ in range(brokers)]
        self.bookie_port = free_port()
        names = [f"broker-{i}" for i in range(1, brokers + 1)] + ["bookie-1"]
        self.agents = [
            AgentProcess(
                name, "bookie" if name.startswith("bookie") else "broker", work_dir / "agents", "",
                hold_timeout=hold_timeout, prepare_timeout=prepare_timeout, spark_master=spark_master,
                zk_listen=f"127.0.0.1:{free_port()}",
            )
            for name in names
        ]  # fmt: skip
        self.brokers: list[JavaProcess] = []
        self.bookie: JavaProcess | None = None
        self.on_etcd = False
        """True once the bookie and brokers run on Pulsar's own etcd URLs (no agents)."""

    # ---- addresses ------------------------------------------------------------------------------

    @property
    def source_url(self) -> str:
        return f"{self.zk.url}?timeout={STORE_TIMEOUT_S:g}"

    @property
    def target_url(self) -> str:
        return f"{self.etcd.url}?timeout={STORE_TIMEOUT_S:g}"

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
        """Pulsar's metadata store URL for the process ``name``: its agent, or etcd."""
        return f"etcd:{self.etcd.endpoint}" if self.on_etcd else f"zk:{self.zk_address(name)}"

    def bookie_metadata_uri(self) -> str:
        """The bookie's ``metadataServiceUri``: Pulsar's metadata-store driver (``/ledgers`` is not
        appended: with Pulsar 4.0 it is a ZooKeeper chroot, below which BookKeeper looks for its own
        ``/ledgers``; README, "A real Pulsar cluster"), or BookKeeper's own ZooKeeper driver
        (``zk+hierarchical://.../ledgers``). On etcd, always Pulsar's driver."""
        if self.bookie_driver == "zk+hierarchical" and not self.on_etcd:
            return f"zk+hierarchical://{self.zk_address('bookie-1')}/ledgers"
        return f"metadata-store:{self.metadata_url('bookie-1')}"

    @property
    def pulsar_processes(self) -> list[JavaProcess]:
        return [*self.brokers, *([self.bookie] if self.bookie else [])]

    # ---- start ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Servers, agents, cluster metadata (through broker-1's agent), bookie, brokers."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log4j.write_text(configs.LOG4J2)
        # in the caller's (main) thread: the servers die with the thread that started them
        self.zk.start()
        self.etcd.start()
        self.say(f"ZooKeeper at {self.zk.url}, etcd at {self.etcd.url}; Pulsar {self.release.version}")
        for agent in self.agents:
            agent.source_url = self.source_url
        self.agents[0].work_dir.mkdir(parents=True, exist_ok=True)
        await start_agents(self.agents)
        for agent in self.agents:
            _wait_port(int(self.zk_address(agent.node_id).rsplit(":", 1)[1]), 60.0)
        self.say("agents serving ZooKeeper's protocol: " + ", ".join(
            f"{a.node_id} {a.zk_listen} (pid {a.pid})" for a in self.agents))  # fmt: skip
        await self._initialize_metadata()
        await self._start_pulsar()

    async def _initialize_metadata(self) -> None:
        url = self.metadata_url("broker-1")
        ports = self.broker_ports[0]
        tool = JavaProcess(
            "cluster-metadata-setup",
            [*self.release.java("org.apache.pulsar.PulsarClusterMetadataSetup", heap_mb=192, log_config=self.log4j),
             "--cluster", configs.CLUSTER_NAME, "--metadata-store", url, "--configuration-metadata-store", url,
             "--web-service-url", ports.web_url, "--broker-service-url", ports.service_url],
            self.work_dir / "cluster-metadata-setup.log", self.work_dir,
        )  # fmt: skip
        code = await tool.run_to_end(SETUP_S)
        if code != 0:
            raise PulsarStartError(f"PulsarClusterMetadataSetup exited with {code}:\n{tool.log_tail()}")
        self.say(f"cluster metadata initialized through broker-1's agent ({url})")

    async def _start_pulsar(self) -> None:
        """The bookie first (brokers need one to write), then the brokers together."""
        tag = "-etcd" if self.on_etcd else ""
        bookie_dir = self.work_dir / "bookie-1"
        conf = self.work_dir / f"bookie-1{tag}.conf"
        conf.write_text(configs.bookie_conf(self.bookie_metadata_uri(), self.bookie_port, bookie_dir))
        self.bookie = JavaProcess(
            "bookie-1",
            [*self.release.java("org.apache.bookkeeper.server.Main", heap_mb=160, direct_mb=160, log_config=self.log4j),
             "--conf", str(conf)],
            self.work_dir / f"bookie-1{tag}.log", bookie_dir,
        )  # fmt: skip
        await self.bookie.start()
        self.say(f"bookie-1 started (pid {self.bookie.pid}); waiting for it to serve ...")
        await self._ready(self.bookie, BOOKIE_READY, BOOKIE_READY_S)
        self.brokers = []
        for i, ports in enumerate(self.broker_ports, start=1):
            name = f"broker-{i}"
            conf = self.work_dir / f"{name}{tag}.conf"
            conf.write_text(configs.broker_conf(self.metadata_url(name), ports, self.work_dir / name))
            self.brokers.append(JavaProcess(
                name,
                [*self.release.java("org.apache.pulsar.PulsarBrokerStarter", heap_mb=256, direct_mb=192,
                                    log_config=self.log4j), "--broker-conf", str(conf)],
                self.work_dir / f"{name}{tag}.log", self.work_dir / name,
            ))  # fmt: skip
        for broker in self.brokers:
            await broker.start()
        await asyncio.gather(*(self._ready(b, BROKER_READY, BROKER_READY_S) for b in self.brokers))
        where = "etcd directly" if self.on_etcd else "their agents"
        self.say(f"bookie and {len(self.brokers)} brokers ready on {where}: "
                 + ", ".join(f"{p.name} (pid {p.pid})" for p in self.pulsar_processes))  # fmt: skip

    async def _ready(self, process: JavaProcess, pattern: str, within: float) -> None:
        try:
            await process.wait_for_line(pattern, within)
        except ProcessStartError as e:
            raise PulsarStartError(str(e)) from None

    # ---- restart on etcd --------------------------------------------------------------------------

    async def stop_pulsar(self) -> None:
        """Stop the brokers, then the bookie (SIGTERM: they shut down in order)."""
        await asyncio.gather(*(b.stop() for b in self.brokers), return_exceptions=True)
        if self.bookie is not None:
            await self.bookie.stop()

    async def restart_on_etcd(self) -> None:
        """Stop the brokers, the bookie and every agent; start the bookie and the brokers again with
        Pulsar's own etcd URLs (``etcd:http://...``, ``metadata-store:etcd:http://...``), no agent."""
        await self.stop_pulsar()
        await stop_agents(self.agents)
        self.say("brokers, bookie and agents stopped; starting the bookie and brokers on etcd directly ...")
        self.on_etcd = True
        await self._start_pulsar()

    # ---- cleanup --------------------------------------------------------------------------------

    async def cleanup(self, keep: bool = False) -> None:
        """Stop every process and server; remove the work directory unless ``keep``. Never raises."""
        with contextlib.suppress(Exception):
            await self.stop_pulsar()
        with contextlib.suppress(Exception):
            await stop_agents(self.agents)
        for server in (self.zk, self.etcd):
            with contextlib.suppress(Exception):
                server.cleanup()
        if not keep:
            shutil.rmtree(self.work_dir, ignore_errors=True)
