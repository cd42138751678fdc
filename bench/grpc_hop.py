# ruff: noqa: E402  (gRPC's environment is set before the imports that load gRPC)
"""A bare gRPC hop, the floor under any gateway written on grpcio in Python: an echo server in its
own process (``grpc.aio`` on uvloop, the agent's settings from ``metashift.grpc_env``, a unix
socket), and a path that calls it as ``metashift.client`` calls the agent (messages on one open
bidirectional stream, answered in order), with the sizes of the gateway's calls (get: a short
request and a 1 KB answer; put and create: a 1 KB request and a short answer).

Its one-at-a-time p50 is what a gRPC call costs between two Python processes on this machine
before any work is done; ``bench/gateway.py`` shows the gateway's own added latency beyond it.

Given a store (``--store URL``), the server is the barest gateway there is: each message is one
call of that store (``metashift.open_store``: a get, a blind put or a create of the path the
message names) and its answer. Its p50 beyond the store's direct p50 is what a ``grpc.aio``
server pays to put a store behind a gRPC call on this machine (a thread wakeup per message for
gRPC's poller, and the loop's wakeups after it slept waiting for the store), the least any
gateway written on it can add. Neither hop's throughput is a floor: the client coalesces calls
made side by side into Batch calls, the hop answers its messages one by one, in order.

    .venv/bin/python bench/grpc_hop.py --serve unix:/tmp/echo.sock [--store URL]   (the benchmark starts it)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root, so that ``bench`` imports
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from metashift import grpc_env

grpc_env.configure()  # the agent's gRPC environment, set before grpc loads

# isort: split
import grpc
import grpc.aio

from bench.floors import VALUE, CallPath, ServerProcess, wait_serving
from metashift import processes
from metashift.stores import MetadataStore

_SERVICE, _METHOD = "metashift.bench.Echo", "Call"
#: What the echo answers: the request itself when it is short (a put's answer stands for the
#: gateway's short answer), a 1 KB value when the request is short (a get).
_SHORT = 64


def _identity(b: bytes) -> bytes:
    return b


def _answer(request: bytes) -> bytes:
    return VALUE if len(request) <= _SHORT else request[:_SHORT]


async def _echo(requests: AsyncIterator[bytes], _context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for request in requests:
        yield _answer(request)


#: A store call as a message: its operation, its path, then (put, create) a newline and the value.
_GET, _PUT, _CREATE = b"g", b"p", b"c"
#: The first byte of the bare gateway's answer to a call that failed (then the error's text; the
#: benchmark's values never start with it).
_FAILED = b"!"


def _store_answerer(store: MetadataStore) -> Callable[[AsyncIterator[bytes], Any], AsyncIterator[bytes]]:
    """The bare gateway's handler: each message is one call of ``store``, answered in order."""

    async def answer(requests: AsyncIterator[bytes], _context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for request in requests:
            op, rest = request[:1], request[1:]
            try:
                if op == _GET:
                    found = await store.get(rest.decode())
                    yield found[0] if found is not None else _FAILED + b"no such node"
                    continue
                path, _, value = rest.partition(b"\n")
                await store.put(path.decode(), value, -1 if op == _CREATE else None)
            except Exception as err:  # answered, not raised: the stream goes on, the caller raises it
                yield _FAILED + str(err).encode()
                continue
            yield request[:_SHORT]

    return answer


async def serve(address: str, store_url: str | None = None) -> None:
    """Serve the echo on ``address`` until killed; with ``store_url``, the bare gateway."""
    server = grpc.aio.server()
    handle: Callable[[AsyncIterator[bytes], Any], AsyncIterator[bytes]]
    if store_url is None:
        handle = _echo
    else:
        import metashift

        handle = _store_answerer(await metashift.open_store(store_url))
    handler = grpc.stream_stream_rpc_method_handler(handle, request_deserializer=_identity,
                                                    response_serializer=_identity)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, {_METHOD: handler}),))
    server.add_insecure_port(address)
    await server.start()
    await server.wait_for_termination()


class Hop:
    """The echo server's process (the bare gateway's, given a store) and a channel to it."""

    def __init__(self, socket_path: str, store_url: str | None = None) -> None:
        self.address = f"unix:{socket_path}"
        self.socket_path = socket_path
        cmd = [sys.executable, os.path.abspath(__file__), "--serve", self.address]
        self.proc = processes.start(cmd + (["--store", store_url] if store_url else []))
        what = "the bare gateway" if store_url else "the gRPC echo server"
        wait_serving(self.process(), lambda: os.path.exists(socket_path), 60, what)
        self.channel = grpc.aio.insecure_channel(self.address)
        self._stream: Any = None
        self._answers: deque[asyncio.Future[bytes]] = deque()
        self._writing = asyncio.Lock()  # one write at a time on a gRPC stream
        self._reader: asyncio.Task[None] | None = None

    async def call(self, payload: bytes) -> bytes:
        """One message out and its answer back, on the one stream (opened at the first call)."""
        if self._stream is None:
            self._stream = self.channel.stream_stream(f"/{_SERVICE}/{_METHOD}", request_serializer=_identity,
                                                      response_deserializer=_identity)()
            self._reader = asyncio.get_running_loop().create_task(self._read())
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._answers.append(answer)
        async with self._writing:
            await self._stream.write(payload)
        return await answer

    async def _read(self) -> None:
        try:
            async for message in self._stream:  # answered in order
                self._answers.popleft().set_result(message)
        finally:  # the stream ended or broke: no answer comes to the calls still waiting
            while self._answers:
                waiting = self._answers.popleft()
                if not waiting.done():
                    waiting.set_exception(RuntimeError(f"the stream to {self.address} ended"))

    def path(self, name: str) -> CallPath:
        """The hop as a benchmark path: get, put and create with the gateway's sizes."""
        short, value = b"/bench/node", VALUE
        return CallPath(name, {
            "get": (lambda i: self.call(short), lambda i: self.call(short)),
            "put": (lambda i: self.call(value), lambda i: self.call(value)),
            "create": (lambda i: self.call(value), lambda i: self.call(value)),
        }, self.process())

    def store_path(self, name: str, base: str, keys: int) -> CallPath:
        """The bare gateway as a benchmark path: the calls of ``gateway``'s store paths under
        ``base`` (``base/node``, ``base/k0``.. ``base/k{keys-1}`` written already)."""

        def put(op: bytes, path: str) -> Awaitable[bytes]:
            return self.store_call(op + path.encode() + b"\n" + VALUE)

        return CallPath(name, {
            "get": (lambda i: self.store_call(_GET + f"{base}/node".encode()),
                    lambda i: self.store_call(_GET + f"{base}/k{i % keys}".encode())),
            "put": (lambda i: put(_PUT, f"{base}/node"), lambda i: put(_PUT, f"{base}/k{i % keys}")),
            "create": (lambda i: put(_CREATE, f"{base}/c{i}"), lambda i: put(_CREATE, f"{base}/p{i}")),
        }, self.process())

    async def store_call(self, message: bytes) -> bytes:
        """One call of the bare gateway's store: its answer, or the store's error raised (as the
        other rows' calls raise theirs), not timed as a success."""
        answer = await self.call(message)
        if answer.startswith(_FAILED):
            raise RuntimeError(f"the bare gateway's store: {answer[1:].decode(errors='replace')}")
        return answer

    def process(self) -> ServerProcess:
        """The server's process, as a ``ServerProcess`` of the benchmark (its CPU is read the same way)."""
        return ServerProcess(self.proc, self.socket_path)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        await self.channel.close()
        self.stop()

    def stop(self) -> None:
        processes.stop(self.proc, 10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", required=True, metavar="ADDRESS", help="serve the echo on ADDRESS (unix:PATH)")
    parser.add_argument("--store", metavar="URL", help="answer each message with a call of this store")
    args = parser.parse_args()
    from metashift.stores.aio import run_loop

    run_loop(serve(args.serve, args.store))
    return 0


if __name__ == "__main__":
    sys.exit(main())
