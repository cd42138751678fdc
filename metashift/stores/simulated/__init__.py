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

    def __init__(self, faults: FaultPlan | None = None, *, streams: int = 1) -> None:
        self.faults = faults
        self.streams = streams
        """Notification streams of each server made here (``SimulatedServer.streams``)."""
        self.servers: dict[str, SimulatedServer] = {}

    def server(self, name: str, *, streams: int | None = None) -> SimulatedServer:
        """The server ``name``, made on first use (with ``streams`` notification streams, else
        this directory's number)."""
        if name not in self.servers:
            self.servers[name] = SimulatedServer(name, faults=self.faults, streams=streams or self.streams)
        return self.servers[name]

    async def open(self, url: str, *, watch: bool = True) -> SimulatedStore:
        """A store on the server a ``sim://NAME[/root][?session_timeout=S&streams=N]`` URL names
        (``streams``: the server's notification streams, when this call makes it)."""
        parsed = parse_url(url)
        streams = int(parsed.options["streams"]) if "streams" in parsed.options else None
        return await SimulatedStore.connect(self.server(parsed.hosts[0][0], streams=streams), parsed, watch=watch)


def parse_url(url: str) -> StoreURL:
    """``sim://NAME[/root][?session_timeout=S&timeout=S&streams=N]`` as a ``StoreURL``."""
    parts = urlsplit(url)
    if parts.scheme != SCHEME or not parts.hostname:
        raise InvalidStoreURL(f"not a simulated store URL (sim://NAME/root): {url!r}")
    options = dict(parse_qsl(parts.query))
    unknown = set(options) - {"session_timeout", "timeout", "streams"}
    if unknown:
        raise InvalidStoreURL(f"unknown option(s) {', '.join(sorted(unknown))} for a simulated store URL")
    if not options.get("streams", "1").isdigit() or int(options.get("streams", "1")) < 1:
        raise InvalidStoreURL(f"streams must be a whole number of at least 1 in {url!r}")
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
