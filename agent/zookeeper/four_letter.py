"""ZooKeeper's four-letter words: a connection whose first four bytes are a command (``srvr``,
``ruok``, ...) instead of a packet length gets a text answer, and the connection closes.

Health checks, ``zkServer.sh status``-style probes, monitoring (``mntr``) and client libraries
use them: aiozk sends ``srvr`` before every connection and reads the server's version from it,
kazoo's ``server_version()`` reads ``envi``. The answers follow ZooKeeper 3.8's formats (one
function per word); the figures are the front's own (its connections, packets, latencies,
sessions, watches), never the store's. Left out on purpose: the node count (``Node count``,
``zk_znode_count``) - counting would walk the whole tree of the store on every health check.
"""

from __future__ import annotations

import getpass
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metashift import __version__

#: The ZooKeeper version the front answers as: the protocol level it serves (3.5-3.9 clients;
#: multiRead, addWatch, whoAmI), with metashift's own version after the dash (clients read
#: ``X.Y.Z-`` from it).
ZOOKEEPER_VERSION = f"3.8.4-metashift-{__version__}, built on 1970-01-01 00:00 UTC"


@dataclass
class ConnectionFacts:
    """One client connection as ``cons`` and ``stat`` list it."""

    peer: str
    session_id: int = 0
    received: int = 0
    sent: int = 0
    queued: int = 0


@dataclass
class LatencyStats:
    """Request latencies of the front (ZooKeeper's ``Latency min/avg/max``), in ms."""

    count: int = 0
    total_ms: float = 0.0
    min_ms: float = 0.0
    max_ms: float = 0.0

    def observe(self, ms: float) -> None:
        self.min_ms = ms if self.count == 0 else min(self.min_ms, ms)
        self.max_ms = max(self.max_ms, ms)
        self.count += 1
        self.total_ms += ms

    @property
    def avg_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0


@dataclass
class FrontFacts:
    """What the four-letter words report, gathered by the server when one is asked."""

    host: str
    port: int
    tls: bool
    min_timeout_ms: int
    max_timeout_ms: int
    zxid: int
    connections: list[ConnectionFacts]
    sessions: int
    ephemerals: int
    watches: int
    watched_paths: int
    received: int
    sent: int
    latency: LatencyStats
    started: float
    active_store: str
    store_url: str
    write_gate_open: bool
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def outstanding(self) -> int:
        return sum(c.queued for c in self.connections)


def _srvr_lines(f: FrontFacts) -> list[str]:
    return [
        f"Latency min/avg/max: {f.latency.min_ms:.0f}/{f.latency.avg_ms:.4f}/{f.latency.max_ms:.0f}",
        f"Received: {f.received}",
        f"Sent: {f.sent}",
        f"Connections: {len(f.connections)}",
        f"Outstanding: {f.outstanding}",
        f"Zxid: {f.zxid:#x}",
        "Mode: standalone",
    ]


def _cons_line(c: ConnectionFacts) -> str:
    return f" /{c.peer}[1](queued={c.queued},recved={c.received},sent={c.sent},sid={c.session_id:#x})"


def ruok(f: FrontFacts) -> str:
    return "imok"


def isro(f: FrontFacts) -> str:
    return "rw"  # the front always takes writes (a migration holds them, it does not refuse them)


def srvr(f: FrontFacts) -> str:
    return "\n".join([f"Zookeeper version: {ZOOKEEPER_VERSION}", *_srvr_lines(f)]) + "\n"


def stat(f: FrontFacts) -> str:
    clients = ["Clients:", *(_cons_line(c) for c in f.connections), ""]
    return "\n".join([f"Zookeeper version: {ZOOKEEPER_VERSION}", *clients, *_srvr_lines(f)]) + "\n"


def cons(f: FrontFacts) -> str:
    return "\n".join(_cons_line(c) for c in f.connections) + "\n\n"


def wchs(f: FrontFacts) -> str:
    return f"{f.sessions} connections watching {f.watched_paths} paths\nTotal watches:{f.watches}\n"


def envi(f: FrontFacts) -> str:
    facts = {
        "zookeeper.version": ZOOKEEPER_VERSION,
        "host.name": socket.gethostname(),
        "metashift.version": __version__,
        "python.version": platform.python_version(),
        "python.executable": sys.executable,
        "os.name": platform.system(),
        "os.arch": platform.machine(),
        "os.version": platform.release(),
        "user.name": getpass.getuser(),
        "user.dir": os.getcwd(),
        "process.id": str(os.getpid()),
    }
    return "Environment:\n" + "".join(f"{k}={v}\n" for k, v in facts.items())


def conf(f: FrontFacts) -> str:
    facts = {
        "clientPort": str(-1 if f.tls else f.port),
        "secureClientPort": str(f.port if f.tls else -1),
        "clientPortAddress": f.host,
        "minSessionTimeout": str(f.min_timeout_ms),
        "maxSessionTimeout": str(f.max_timeout_ms),
        "serverId": "0",
        "metashift.store": f.store_url,
        "metashift.activeStore": f.active_store,
        **f.extra,
    }
    return "".join(f"{k}={v}\n" for k, v in facts.items())


def mntr(f: FrontFacts) -> str:
    facts: dict[str, object] = {
        "zk_version": ZOOKEEPER_VERSION,
        "zk_server_state": "standalone",
        "zk_avg_latency": round(f.latency.avg_ms, 4),
        "zk_min_latency": round(f.latency.min_ms),
        "zk_max_latency": round(f.latency.max_ms),
        "zk_packets_received": f.received,
        "zk_packets_sent": f.sent,
        "zk_num_alive_connections": len(f.connections),
        "zk_outstanding_requests": f.outstanding,
        "zk_global_sessions": f.sessions,
        "zk_ephemerals_count": f.ephemerals,
        "zk_watch_count": f.watches,
        "zk_uptime": int((time.monotonic() - f.started) * 1000),
        "metashift_active_store": f.active_store,
        "metashift_write_gate_open": int(f.write_gate_open),
    }
    return "".join(f"{k}\t{v}\n" for k, v in facts.items())


#: The words answered, as the four bytes that arrive in place of a packet length.
WORDS: dict[bytes, Callable[[FrontFacts], str]] = {
    b"ruok": ruok,
    b"isro": isro,
    b"srvr": srvr,
    b"stat": stat,
    b"cons": cons,
    b"wchs": wchs,
    b"envi": envi,
    b"conf": conf,
    b"mntr": mntr,
}


def answer(word: bytes, facts: FrontFacts) -> bytes:
    """The text answer to ``word`` (one of ``WORDS``)."""
    return WORDS[word](facts).encode()
