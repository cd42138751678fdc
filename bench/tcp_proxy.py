"""A bare TCP proxy, the floor under any proxy of ZooKeeper's protocol written on asyncio in Python:
a uvloop server in its own process that copies bytes between each client and a connection of its
own to the server, parsing nothing (no session, no gate, no packet framing).

``bench/zk_front.py`` runs ZooKeeper's protocol through it beside the agent: what it costs a
client (throughput with many requests pipelined, p50 one at a time, CPU per call) is what any
process in the path costs on this machine; the agent's figures beyond it are the front's own.

    .venv/bin/python bench/tcp_proxy.py --serve PORT --to UPSTREAM_PORT   (the benchmark starts it)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root, so that ``bench`` imports
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.floors import ServerProcess, listening, wait_serving
from metashift import processes


class _Upstream(asyncio.Protocol):
    """The proxy's connection to the server: what it answers goes to the client as it is."""

    def __init__(self, client: _Client) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        if self.client.transport is not None:
            self.client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.client.transport is not None:
            self.client.transport.close()


class _Client(asyncio.Protocol):
    """One client's connection: what it sends goes to the server as it is (held until connected)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses
        self.upstream: Any = None
        self.early: list[bytes] = []
        self.connecting: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(lambda: _Upstream(self), "127.0.0.1", self.upstream_port)
        except OSError:
            self.transport.close()  # no server: the client sees its connection end
            return
        if self.transport.is_closing():  # the client went while we connected (a readiness probe)
            upstream.close()
            return
        self.upstream = upstream
        for data in self.early:
            upstream.write(data)
        self.early.clear()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.early.append(data)
        else:
            self.upstream.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


async def serve(port: int, upstream_port: int) -> None:
    """Proxy 127.0.0.1:``port`` to 127.0.0.1:``upstream_port`` until killed."""
    server = await asyncio.get_running_loop().create_server(lambda: _Client(upstream_port), "127.0.0.1", port)
    await server.serve_forever()


def start(port: int, upstream_port: int) -> ServerProcess:
    """The proxy's process, as a ``ServerProcess`` of the benchmark (its CPU is read the same way)."""
    proc = processes.start([sys.executable, os.path.abspath(__file__), "--serve", str(port), "--to",
                            str(upstream_port)])  # fmt: skip
    proxy = ServerProcess(proc, "", port)
    wait_serving(proxy, lambda: listening(port), 60, "the bare TCP proxy")
    return proxy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", type=int, required=True, metavar="PORT", help="listen on 127.0.0.1:PORT")
    parser.add_argument("--to", type=int, required=True, metavar="PORT", help="the server's port on 127.0.0.1")
    args = parser.parse_args()
    from metashift.stores.aio import run_loop

    run_loop(serve(args.serve, args.to))
    return 0


if __name__ == "__main__":
    sys.exit(main())
