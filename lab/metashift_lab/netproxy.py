"""A TCP proxy on loopback in front of one upstream address, whose link can be cut and slowed while
it runs: ``pass`` (bytes copied as they come), ``drop`` (every connection reset, new ones reset at
once: a node whose packets are refused), ``blackhole`` (connections kept, nothing forwarded either
way, new ones accepted and left waiting: a cut cable, where packets vanish and nobody sends a
reset) and ``delay`` (each direction adds the same latency: a store in another zone).

A blackhole holds bytes rather than discarding them, as TCP does on a cut cable: what was sent
before the heal arrives after it (TCP retransmits) unless an endpoint gave up and closed meanwhile.

Each proxy runs its own event loop in a thread of its own, so a test's event loop (or any thread)
switches modes with a plain call that returns once the new mode is in force. ``ProxySet`` is one
proxy per member of a replicated store, and the store's URL with the proxies' addresses in place
of the members' (``zk://p1,p2,p3``).

A listening or upstream socket can be made in another network namespace (``listen_netns``,
``upstream_netns``: a path such as ``/run/netns/NAME``); ``metashift_lab.netns`` builds on that."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import ctypes
import enum
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Self

#: Connections a proxy holds at once; one more is reset (a bound on what a runaway client costs).
MAX_CONNECTIONS = 512
#: Bytes one direction of one connection may queue while delayed (or held) before the proxy stops
#: reading that side (TCP's flow control then slows the sender, as a full window would).
MAX_QUEUED = 4 * 1024 * 1024
#: Seconds a mode switch, the start or the stop may take before the caller is told.
CONTROL_TIMEOUT = 10.0
#: Linux's ``CLONE_NEWNET`` (setns's namespace type).
_CLONE_NEWNET = 0x40000000


class Mode(enum.Enum):
    """What a proxy does with its connections' bytes."""

    PASS = "pass"
    DROP = "drop"
    BLACKHOLE = "blackhole"
    DELAY = "delay"


@dataclass(frozen=True)
class Link:
    """A link's state: its mode and, for ``DELAY``, the latency each direction adds (milliseconds)."""

    mode: Mode = Mode.PASS
    delay_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or (self.mode is Mode.DELAY) != (self.delay_ms > 0):
            raise ValueError(f"a delay > 0 ms goes with Mode.DELAY alone: {self}")

    @property
    def forwards(self) -> bool:
        """Bytes move on this link (pass or delay)."""
        return self.mode in (Mode.PASS, Mode.DELAY)

    def __str__(self) -> str:
        return f"delay {self.delay_ms:g} ms" if self.mode is Mode.DELAY else self.mode.value


PASS = Link()
DROP = Link(Mode.DROP)
BLACKHOLE = Link(Mode.BLACKHOLE)


def delay(ms: float) -> Link:
    """A link adding ``ms`` milliseconds each way."""
    return Link(Mode.DELAY, float(ms))


@dataclass(frozen=True)
class ProxyStats:
    """What a proxy has seen since it started."""

    accepted: int
    """Connections accepted (reset ones included)."""
    open: int
    """Connections open now."""
    reset: int
    """Connections the proxy reset (dropped, over ``MAX_CONNECTIONS``, or no upstream)."""
    to_upstream: int
    """Bytes forwarded to the upstream."""
    to_client: int
    """Bytes forwarded to the clients."""


class ProxyError(RuntimeError):
    """The proxy could not start, or a control call did not complete in time."""


# ---- sockets in a network namespace ----------------------------------------------------------------


def socket_in(netns: str | None, family: int = socket.AF_INET) -> socket.socket:
    """A TCP socket of network namespace ``netns`` (a path such as ``/run/netns/NAME``; ``None``:
    this thread's). Made by a short-lived thread that enters the namespace (setns moves only the
    calling thread), so no thread of the caller's ever changes namespace."""
    if netns is None:
        return socket.socket(family, socket.SOCK_STREAM)
    made: concurrent.futures.Future[socket.socket] = concurrent.futures.Future()

    def make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            made.set_result(socket.socket(family, socket.SOCK_STREAM))
        except BaseException as e:  # handed to the caller
            made.set_exception(e)

    # the thread ends right after: its namespace dies with it, the socket keeps its own
    thread = threading.Thread(target=make, name="netns socket", daemon=True)
    thread.start()
    thread.join(CONTROL_TIMEOUT)
    return made.result(timeout=0)


def _reset(transport: Any) -> None:
    """Close with a TCP reset (SO_LINGER 0), not a FIN: a refused or cut connection, as a client
    of a dead link sees it."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


# ---- one connection: a client's and the proxy's own to the upstream --------------------------------


class _Direction:
    """Bytes on their way one way, each chunk with the time it may leave (delay), in order."""

    def __init__(self) -> None:
        self.chunks: collections.deque[tuple[float, bytes]] = collections.deque()
        self.queued = 0
        self.timer: asyncio.TimerHandle | None = None


class _Side(asyncio.Protocol):
    """One end of a proxied connection (the client's, or the proxy's own to the upstream)."""

    def __init__(self, pipe: _Pipe, upstream: bool) -> None:
        self.pipe = pipe
        self.upstream = upstream
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if not self.upstream:
            self.pipe.proxy._admit(self.pipe)

    def data_received(self, data: bytes) -> None:
        self.pipe.received(self, data)

    def eof_received(self) -> bool:
        self.pipe.eof(self)
        return True  # half-closed: the other side may still answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.pipe.lost(self)

    def pause_writing(self) -> None:
        self.pipe.flow()

    def resume_writing(self) -> None:
        self.pipe.flow()


class _Pipe:
    """A client's connection and the proxy's to the upstream, with what travels each way."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy
        self.client = _Side(self, upstream=False)
        self.server: _Side | None = None
        self.up = _Direction()  # client -> upstream
        self.down = _Direction()  # upstream -> client
        self.eof_from: set[bool] = set()  # which sides sent EOF (True: the upstream)
        self.gone: set[bool] = set()  # which sides closed
        self.closed = False
        self.connecting: asyncio.Task[None] | None = None

    # ---- set up -------------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the proxy's connection to the upstream (after one round trip of the link's delay)."""
        if self.connecting is None and self.server is None and not self.closed:
            self.connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        link = self.proxy.link
        if link.mode is Mode.DELAY:
            await asyncio.sleep(2 * link.delay_ms / 1000)  # the handshake's round trip on the link
        loop = asyncio.get_running_loop()
        host, port = self.proxy.upstream
        try:
            sock = socket_in(self.proxy.upstream_netns) if self.proxy.upstream_netns else None
            if sock is not None:
                sock.setblocking(False)
                try:
                    await loop.sock_connect(sock, (host, port))
                except BaseException:
                    sock.close()
                    raise
                _, side = await loop.create_connection(lambda: _Side(self, upstream=True), sock=sock)
            else:
                _, side = await loop.create_connection(lambda: _Side(self, upstream=True), host, port)
        except OSError:
            self.reset()  # no upstream: the client sees its connection refused
            return
        finally:
            self.connecting = None
        if self.closed:
            _reset(side.transport)
            return
        self.server = side
        self.apply()

    # ---- bytes --------------------------------------------------------------------------------

    def _direction(self, side: _Side) -> _Direction:
        return self.down if side.upstream else self.up

    def _peer(self, side: _Side) -> _Side | None:
        return self.client if side.upstream else self.server

    def received(self, side: _Side, data: bytes) -> None:
        link = self.proxy.link
        direction = self._direction(side)
        due = time.monotonic() + (link.delay_ms / 1000 if link.mode is Mode.DELAY else 0.0)
        direction.chunks.append((due, data))
        direction.queued += len(data)
        self._send(side)
        self.flow()

    def eof(self, side: _Side) -> None:
        self.eof_from.add(side.upstream)
        self._send(side)

    def _send(self, side: _Side) -> None:
        """Write what is due of what ``side`` sent to its peer; a timer for the rest."""
        direction = self._direction(side)
        peer = self._peer(side)
        if direction.timer is not None:
            direction.timer.cancel()
            direction.timer = None
        if peer is None or peer.transport is None or not self.proxy.link.forwards or self.closed:
            return  # held: sent once connected, or once the link heals
        now = time.monotonic()
        while direction.chunks and direction.chunks[0][0] <= now:
            _, data = direction.chunks.popleft()
            direction.queued -= len(data)
            peer.transport.write(data)
            self.proxy._count(side.upstream, len(data))
        if direction.chunks:
            loop = asyncio.get_running_loop()
            direction.timer = loop.call_at(loop.time() + direction.chunks[0][0] - now, self._send, side)
        elif side.upstream in self.gone or (self.eof_from == {True, False} and not self.up.chunks
                                             and not self.down.chunks):
            self.close()  # all it sent is out: its end reaches the peer as a FIN
        elif side.upstream in self.eof_from and peer.transport.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                peer.transport.write_eof()

    def flow(self) -> None:
        """Read a side only while the link forwards and what it sent fits the bound (queued here,
        and in the peer's write buffer)."""
        for side, direction in ((self.client, self.up), (self.server, self.down)):
            if side is None or side.transport is None or self.closed:
                continue
            peer = self._peer(side)
            peer_full = peer is not None and peer.transport is not None and (
                peer.transport.get_write_buffer_size() > MAX_QUEUED)
            if self.proxy.link.forwards and direction.queued <= MAX_QUEUED and not peer_full:
                with contextlib.suppress(RuntimeError, AttributeError):
                    side.transport.resume_reading()
            else:
                with contextlib.suppress(RuntimeError, AttributeError):
                    side.transport.pause_reading()

    def apply(self) -> None:
        """The proxy's link changed (or the upstream connected): act on it."""
        link = self.proxy.link
        if self.closed:
            return
        if link.mode is Mode.DROP:
            self.reset()
            return
        if link.forwards:
            if self.server is None:
                self.connect()
            else:
                for side in (self.client, self.server):
                    self._send(side)
        self.flow()

    # ---- the end --------------------------------------------------------------------------------

    def lost(self, side: _Side) -> None:
        """One side closed: the other closes once what it was sent is out (at once on a reset)."""
        if self.closed:
            return
        peer = self._peer(side)
        if peer is None or peer.transport is None:
            self.close()
            return
        # what the closed side sent before it went is still delivered (a FIN after the data)
        self.gone.add(side.upstream)
        self._send(side)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for direction in (self.up, self.down):
            if direction.timer is not None:
                direction.timer.cancel()
        if self.connecting is not None:
            self.connecting.cancel()
        for side in (self.client, self.server):
            if side is not None and side.transport is not None:
                side.transport.close()
        self.proxy._forget(self)

    def reset(self) -> None:
        """Both connections reset (a dropped link)."""
        if self.closed:
            return
        for side in (self.client, self.server):
            if side is not None and side.transport is not None:
                _reset(side.transport)
        self.proxy._resets += 1
        self.close()


# ---- the proxy ------------------------------------------------------------------------------------


class TcpProxy:
    """A TCP proxy from ``listen`` (a free loopback port unless told) to ``upstream``, its link
    switched at run time (``set``, ``pass_``, ``drop``, ``blackhole``, ``delay``) from any thread."""

    def __init__(
        self, upstream: tuple[str, int], *, listen_host: str = "127.0.0.1", listen_port: int = 0,
        listen_netns: str | None = None, upstream_netns: str | None = None, link: Link = PASS,
        max_connections: int = MAX_CONNECTIONS, name: str | None = None,
    ) -> None:  # fmt: skip
        self.upstream = upstream
        self.listen_host, self.listen_port = listen_host, listen_port
        self.listen_netns, self.upstream_netns = listen_netns, upstream_netns
        self.link = link
        self.max_connections = max_connections
        self.name = name or f"proxy to {upstream[0]}:{upstream[1]}"
        self._pipes: set[_Pipe] = set()
        self._accepted = self._resets = self._to_upstream = self._to_client = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    # ---- what a client dials ------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the proxy listens on (known once started)."""
        if self._server is None:
            raise ProxyError(f"{self.name} is not started")
        return self.listen_port

    @property
    def address(self) -> str:
        """``host:port`` a client dials to go through the proxy."""
        return f"{self.listen_host}:{self.port}"

    # ---- start and stop -------------------------------------------------------------------------

    def start(self) -> Self:
        """Listen, in a thread of the proxy's own; return once it accepts connections."""
        if self._thread is not None:
            raise ProxyError(f"{self.name} is already started")
        sock = socket_in(self.listen_netns)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.listen_host, self.listen_port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as e:
            sock.close()
            raise ProxyError(f"{self.name}: cannot listen on {self.listen_host}:{self.listen_port}: {e}") from None
        self.listen_port = sock.getsockname()[1]
        loop = asyncio.new_event_loop()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                self._server = loop.run_until_complete(loop.create_server(self._accept, sock=sock))
                ready.set_result(None)
            except BaseException as e:
                sock.close()
                ready.set_exception(e)
                loop.close()
                return
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.result(timeout=CONTROL_TIMEOUT)
        return self

    def stop(self) -> None:
        """Stop listening and close every connection (reset); the proxy's thread ends. Never raises."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(CONTROL_TIMEOUT)
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.reset()
        await asyncio.sleep(0)  # the aborted transports' callbacks run before the loop stops

    def __enter__(self) -> Self:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the link ---------------------------------------------------------------------------------

    def set(self, link: Link) -> None:
        """Put ``link`` in force on every connection, open and new; returns once it is."""
        self._call(self._apply, link)

    def pass_(self) -> None:
        """Heal the link: bytes flow again (what a blackhole held is delivered)."""
        self.set(PASS)

    def drop(self) -> None:
        """Reset every connection; reset new ones at once."""
        self.set(DROP)

    def blackhole(self) -> None:
        """Forward nothing either way and send no reset; new connections wait."""
        self.set(BLACKHOLE)

    def delay(self, ms: float) -> None:
        """Add ``ms`` milliseconds each way."""
        self.set(delay(ms))

    async def _apply(self, link: Link) -> None:
        self.link = link
        for pipe in list(self._pipes):
            pipe.apply()

    def stats(self) -> ProxyStats:
        """Connections and bytes so far."""
        return ProxyStats(self._accepted, len(self._pipes), self._resets, self._to_upstream, self._to_client)

    # ---- inside the proxy's loop ------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._loop is None:
            raise ProxyError(f"{self.name} is not started")
        if threading.current_thread() is self._thread:
            raise ProxyError(f"{self.name}: a control call from the proxy's own thread would wait on itself")
        future = asyncio.run_coroutine_threadsafe(fn(*args), self._loop)
        try:
            return future.result(CONTROL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise ProxyError(f"{self.name}: {fn.__name__} did not complete in {CONTROL_TIMEOUT:g}s") from None

    def _accept(self) -> asyncio.Protocol:
        return _Pipe(self).client

    def _admit(self, pipe: _Pipe) -> None:
        """A client connected: reset it on a dropped link or past the bound, else serve it."""
        self._accepted += 1
        if self.link.mode is Mode.DROP or len(self._pipes) >= self.max_connections:
            self._resets += 1
            pipe.closed = True
            _reset(pipe.client.transport)
            return
        self._pipes.add(pipe)
        pipe.apply()

    def _forget(self, pipe: _Pipe) -> None:
        self._pipes.discard(pipe)

    def _count(self, from_upstream: bool, n: int) -> None:
        if from_upstream:
            self._to_client += n
        else:
            self._to_upstream += n


# ---- one proxy per member -------------------------------------------------------------------------


def split_hosts(hosts: str) -> list[tuple[str, int]]:
    """``h1:p1,h2:p2`` -> ``[(h1, p1), (h2, p2)]``."""
    found: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"not host:port: {item!r} (in {hosts!r})")
        found.append((host.strip("[]"), int(port)))
    return found


def url_hosts(url: str) -> tuple[str, str, str]:
    """A store URL's scheme, host list and rest: ``zk://h1:1,h2:2/chroot?x=1`` ->
    ``("zk", "h1:1,h2:2", "/chroot?x=1")``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a store URL: {url!r}")
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    return scheme, rest[:end], rest[end:]


class ProxySet:
    """One proxy per member of a store: the URL through them, every link switched together or
    one member's alone."""

    def __init__(self, upstreams: Iterable[tuple[str, int]], *, template: str | None = None, **proxy: Any) -> None:
        self.proxies = [TcpProxy(upstream, **proxy) for upstream in upstreams]
        self._template = template
        """The URL ``url()`` rewrites unless given another."""

    @classmethod
    def of_url(cls, url: str, **proxy: Any) -> ProxySet:
        """A proxy for every host of store URL ``url`` (its ``url()`` then names the proxies)."""
        return cls(split_hosts(url_hosts(url)[1]), template=url, **proxy)

    @property
    def hosts(self) -> str:
        """The proxies' addresses, comma-separated, in the members' order."""
        return ",".join(p.address for p in self.proxies)

    def url(self, url: str | None = None) -> str:
        """``url`` (the one this set was made from, unless given) with the proxies' addresses in
        place of its hosts, in order."""
        template = url if url is not None else self._template
        if template is None:
            raise ValueError("no URL to rewrite: give one")
        scheme, _, rest = url_hosts(template)
        return f"{scheme}://{self.hosts}{rest}"

    def start(self) -> Self:
        try:
            for proxy in self.proxies:
                proxy.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every proxy. Never raises."""
        for proxy in self.proxies:
            proxy.stop()

    def set(self, link: Link) -> None:
        """``link`` on every member's proxy."""
        for proxy in self.proxies:
            proxy.set(link)

    def __iter__(self) -> Iterator[TcpProxy]:
        return iter(self.proxies)

    def __getitem__(self, index: int) -> TcpProxy:
        return self.proxies[index]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
