"""Start real ZooKeeper, etcd and Oxia servers on loopback, for tests, the demo and the benchmarks.

ZooKeeper and etcd run from the Debian packages (``zookeeper``, ``etcd-server``), Oxia from the
binary ``make setup`` unpacks into ``.cache/oxia`` (or the one ``METASHIFT_OXIA`` names), as child
processes on free ports with their own data directories, and are killed when the Python process ends, whatever way
it ends. ``start()`` returns only once the server really serves.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from metashift import processes
from metashift_lab import CACHE
from metashift_lab.jvm import LEAN_JVM_FLAGS
from metashift_lab.ports import accepts, free_port, listener_pids

#: Seconds a server gets after SIGTERM before SIGKILL.
STOP_GRACE = 10.0
ZOOKEEPER_CLASSPATH = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
#: What every lab ZooKeeper's zoo.cfg says besides its ports and dirs. ``forceSync=no``: the
#: transaction log is written but not fsynced, so a server killed (SIGKILL included) loses
#: nothing, only a crash of the machine could; the lab's faults are process faults, and the
#: fsync was most of a write's latency on this disk (5,000 writes: 4.0 s against 3.1 s).
ZOOKEEPER_LAB_SETTINGS = ("forceSync=no",)
_live: weakref.WeakSet[_LocalServer] = weakref.WeakSet()


class ServerStartError(RuntimeError):
    """A local ZooKeeper, etcd or Oxia did not start (its log's tail in the message)."""

    pass


#: Starts of a server whose chosen port another process took in the meantime.
_PORT_ATTEMPTS = 3


class _PortTaken(Exception):
    """The port chosen for a server is another process's."""


class _LocalServer:
    name = "server"
    _install_hint = "install the Debian packages (make setup)"

    def __init__(self, data_dir: str | os.PathLike[str] | None, port: int | None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix=f"metashift-{self.name}-"))
        self.port = port or free_port()
        self._ports_chosen = port is None  # ours to choose again while the server never served
        self._served = False
        self.process: subprocess.Popen[bytes] | None = None
        _live.add(self)

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it serves.

        Call it from a thread that outlives the server (normally the main thread): the server is
        killed when the thread that started it ends, so that no server outlives a killed run.
        """
        if self.running:
            return
        for attempt in range(_PORT_ATTEMPTS):
            try:
                self._start_once(timeout)
                self._served = True
                return
            except _PortTaken:
                if not self._ports_chosen or self._served or attempt == _PORT_ATTEMPTS - 1:
                    raise ServerStartError(f"{self.name}: port {self.port} is another process's") from None
                self._choose_ports()

    def _choose_ports(self) -> None:
        """New free ports, after another process took one of ours between its choice and our bind."""
        self.port = free_port()

    def _start_once(self, timeout: float) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = self._command()
        if shutil.which(command[0]) is None:
            raise ServerStartError(f"{command[0]} not found: {self._install_hint}")
        with open(self.log_path, "ab") as log:
            # own process group: a Ctrl-C in a test run reaches us, not the server, and we stop it;
            # and it dies with us, so that a killed test run leaves no server behind
            self.process = processes.start(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.data_dir,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log_tail = processes.log_tail(self.log_path)
                if self._ports_chosen and ("already in use" in log_tail.lower()
                                           or listener_pids(self.port) - {self.process.pid}):
                    raise _PortTaken()  # another process took a port of ours before we could bind it
                raise ServerStartError(f"{self.name} exited with {self.process.returncode}; log {self.log_path}:\n"
                                       + log_tail)
            # answering is not enough: the port must be our process's (a free port chosen by one
            # test can be taken by another's server, or an agent's ZooKeeper front, before ours binds)
            if self._ready() and self.process.pid in listener_pids(self.port, self.process.pid):
                return
            time.sleep(0.05)
        self.stop()
        raise ServerStartError(f"{self.name} did not serve on port {self.port} within {timeout}s; log {self.log_path}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); the data directory stays for a restart."""
        proc, self.process = self.process, None
        if proc is not None:
            processes.stop(proc, grace=STOP_GRACE)

    def kill(self) -> None:
        """Stop the server abruptly, like a crash."""
        if self.process is not None:
            processes.kill(self.process)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop, and remove the data directory if we made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class LocalZooKeeper(_LocalServer):
    """A standalone ZooKeeper 3.8 server."""

    name = "zookeeper"

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        jute_maxbuffer: int | None = None,
        heap_mb: int = 512,
    ) -> None:
        super().__init__(data_dir, port)
        self.jute_maxbuffer = jute_maxbuffer
        self.heap_mb = heap_mb

    @property
    def url(self) -> str:
        return f"zk://127.0.0.1:{self.port}"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=*",
                    "maxClientCnxns=0",
                    "minSessionTimeout=2000",
                    "maxSessionTimeout=120000",
                    # snapshots every 100k txns; keep a few so the data dir stays small
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    *ZOOKEEPER_LAB_SETTINGS,
                ]
            )
            + "\n"
        )
        props = [f"-Xmx{self.heap_mb}m", *LEAN_JVM_FLAGS, "-Dzookeeper.admin.enableServer=false"]
        if self.jute_maxbuffer:
            props.append(f"-Djute.maxbuffer={self.jute_maxbuffer}")
        return [
            "java", *props, "-cp", ":".join(ZOOKEEPER_CLASSPATH),
            "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg),
        ]

    def _ready(self) -> bool:
        return "Mode:" in self.four_letter("srvr")

    def four_letter(self, word: str) -> str:
        """A ZooKeeper four-letter command's answer, '' when the server does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(word.encode())
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
        except OSError:
            return ""


@dataclass(frozen=True)
class EtcdTLS:
    """TLS for a local etcd: its certificate and key, the CA that signed it, and (for mutual
    TLS, which makes etcd require client certificates) a client certificate signed by that CA."""

    cert: Path
    key: Path
    ca: Path
    client_cert: Path | None = None
    client_key: Path | None = None


class LocalEtcd(_LocalServer):
    """A single-member etcd 3.4 server."""

    name = "etcd"

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        quota_backend_bytes: int | None = None,
        max_txn_ops: int | None = None,
        max_request_bytes: int | None = None,
        extra_args: list[str] | None = None,
        tls: EtcdTLS | None = None,
    ) -> None:
        super().__init__(data_dir, port)
        self.peer_port = free_port()
        self.tls = tls
        self.quota_backend_bytes = quota_backend_bytes
        self.max_txn_ops = max_txn_ops
        self.max_request_bytes = max_request_bytes
        self.extra_args = list(extra_args or [])

    def _choose_ports(self) -> None:
        super()._choose_ports()
        self.peer_port = free_port()

    @property
    def url(self) -> str:
        if self.tls is None:
            return f"etcd://127.0.0.1:{self.port}"
        query = f"tls=true&ca={self.tls.ca}"
        if self.tls.client_cert and self.tls.client_key:
            query += f"&cert={self.tls.client_cert}&key={self.tls.client_key}"
        return f"etcd://127.0.0.1:{self.port}?{query}"

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            "etcd", "--name", "metashift", "--data-dir", str(self.data_dir / "data"),
            "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"metashift={peer}", "--logger", "zap", "--log-level", "warn",
        ]
        if self.quota_backend_bytes:
            args += ["--quota-backend-bytes", str(self.quota_backend_bytes)]
        if self.max_txn_ops:
            args += ["--max-txn-ops", str(self.max_txn_ops)]
        if self.max_request_bytes:
            args += ["--max-request-bytes", str(self.max_request_bytes)]
        if self.tls:
            args += ["--cert-file", str(self.tls.cert), "--key-file", str(self.tls.key)]
            if self.tls.client_cert:
                args += ["--client-cert-auth", "--trusted-ca-file", str(self.tls.ca)]
        return args + self.extra_args

    def _ready(self) -> bool:
        context = None
        if self.tls:
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            if self.tls.client_cert and self.tls.client_key:
                context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1, context=context) as r:
                return bool(json.load(r).get("health") == "true")
        except (OSError, ValueError, http.client.HTTPException):  # not up, or not etcd answering
            return False


#: Where ``make setup`` puts the Oxia server (``shared/tools/oxia/install.sh``), relative to the
#: repository; ``METASHIFT_OXIA`` names another binary.
OXIA_BINARY = CACHE / "oxia" / "oxia"


def oxia_binary() -> str | None:
    """The Oxia server binary to run (``METASHIFT_OXIA``, else ``make setup``'s), ``None`` when
    there is none."""
    named = os.environ.get("METASHIFT_OXIA")
    if named:
        return named if os.access(named, os.X_OK) else None
    return str(OXIA_BINARY) if os.access(OXIA_BINARY, os.X_OK) else None


class LocalOxia(_LocalServer):
    """An Oxia standalone server (``oxia standalone``) with several shards (real clusters have
    many, and a client that ignores the shard assignments works with one only)."""

    name = "oxia"
    _install_hint = "run make setup (it unpacks ../shared/tools/oxia into .cache/oxia) or set METASHIFT_OXIA"

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        shards: int = 4,
        extra_args: list[str] | None = None,
    ) -> None:
        super().__init__(data_dir, port)
        self.metrics_port = free_port()
        self.shards = shards
        self.extra_args = list(extra_args or [])

    def _choose_ports(self) -> None:
        super()._choose_ports()
        self.metrics_port = free_port()

    @property
    def url(self) -> str:
        """The URL of its ``default`` namespace (standalone Oxia has no other)."""
        return f"oxia://127.0.0.1:{self.port}/default"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        binary = oxia_binary() or "oxia-not-installed"
        return [
            binary, "standalone", "-p", self.address, "-m", f"127.0.0.1:{self.metrics_port}",
            "--data-dir", str(self.data_dir / "db"), "--wal-dir", str(self.data_dir / "wal"),
            "--shards", str(self.shards), "--log-level", "warn", *self.extra_args,
        ]

    def _ready(self) -> bool:
        # the shards are up before the public port listens (``oxia standalone`` starts them first)
        return accepts(self.port)


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        try:
            server.stop()
        except Exception:  # best effort at exit; never mask the real exit status
            pass
