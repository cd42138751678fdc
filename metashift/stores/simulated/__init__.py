"""The simulated store: an in-process implementation of the store interface, for the protocol
simulator and fast unit tests of the protocol (issue 41). It passes the conformance suite the real
backends pass; every behaviour users rely on stays tested on the real servers too.

``SimulatedServers`` is a directory of in-process servers by name, so that a ``sim://NAME/root``
URL opens a store on the server ``NAME`` as a real URL reaches a real server; the product's
``open_store`` knows nothing of it.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from ..errors import InvalidStoreURL
from ..urls import StoreURL
from .faults import NO_FAULT, CallFault, FaultPlan, NoFaults
from .server import SessionExpired, SimulatedServer
from .store import MAX_VALUE_SIZE, SimulatedStore

SCHEME = "sim"


class SimulatedServers:
    """The in-process servers of one simulation (or one test process), by name."""

    def __init__(self, faults: FaultPlan | None = None) -> None:
        self.faults = faults
        self.servers: dict[str, SimulatedServer] = {}

    def server(self, name: str) -> SimulatedServer:
        """The server ``name``, made on first use."""
        if name not in self.servers:
            self.servers[name] = SimulatedServer(name, faults=self.faults)
        return self.servers[name]

    async def open(self, url: str, *, watch: bool = True) -> SimulatedStore:
        """A store on the server a ``sim://NAME[/root][?session_timeout=S]`` URL names."""
        parsed = parse_url(url)
        return await SimulatedStore.connect(self.server(parsed.hosts[0][0]), parsed, watch=watch)


def parse_url(url: str) -> StoreURL:
    """``sim://NAME[/root][?session_timeout=S&timeout=S]`` as a ``StoreURL``."""
    parts = urlsplit(url)
    if parts.scheme != SCHEME or not parts.hostname:
        raise InvalidStoreURL(f"not a simulated store URL (sim://NAME/root): {url!r}")
    options = dict(parse_qsl(parts.query))
    unknown = set(options) - {"session_timeout", "timeout"}
    if unknown:
        raise InvalidStoreURL(f"unknown option(s) {', '.join(sorted(unknown))} for a simulated store URL")
    root = parts.path.rstrip("/") or "/"
    return StoreURL(SCHEME, ((parts.hostname, 0),), root, options=options)


__all__ = [
    "MAX_VALUE_SIZE",
    "NO_FAULT",
    "SCHEME",
    "CallFault",
    "FaultPlan",
    "NoFaults",
    "SessionExpired",
    "SimulatedServer",
    "SimulatedServers",
    "SimulatedStore",
    "parse_url",
]
