"""The Oxia connection: the shard assignments (a ``GetShardAssignments`` stream kept open on one of
the URL's hosts), a ``grpc.aio`` channel per shard leader, every call with the namespace and the
bearer token in its metadata and the URL's timeout, gRPC errors mapped onto the store's.

Oxia's client protocol has no server-side routing: a client hashes each key (``keys.key_hash``)
into the hash ranges of the assignments and sends the call to that shard's leader. The assignment
stream is also the store's view of the connection: it broken for longer than a keep-alive period
is a ``ConnectionLost``, its next answer then a ``Reconnected`` (``Liveness``, shared with the
keep-alives and the notification streams).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from metashift.stores.oxia.proto import client_pb2 as pb
from metashift.stores.oxia.proto import client_pb2_grpc as pb_grpc

from ..errors import AuthFailed, MetadataStoreError, StoreFull, StoreUnavailable
from ..grpc_errors import UNAVAILABLE_CODES, never_sent
from ..notifications import SessionEvent
from ..urls import StoreURL
from .credentials import TokenSource, channel_credentials, tls_failure
from .keys import key_hash

log = logging.getLogger(__name__)

T = TypeVar("T")

_GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 512 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    # reconnect fast after a server restart (gRPC's default backoff grows to 2 minutes)
    ("grpc.initial_reconnect_backoff_ms", 100),
    # the least time a connection attempt gets for its handshake (see the etcd connection)
    ("grpc.min_reconnect_backoff_ms", 10_000),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # detect dead connections under the long-lived streams (Oxia allows pings every 5 s)
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]

#: Oxia's reasons (``common/constant/errors.go``) that mean "try again": a leader moving, a shard
#: being (re)assigned.
_RETRYABLE_TEXT = ("not leader", "not initialized", "resource unavailable", "invalid status", "shard not found")
#: The streamed calls that change nothing (sent again after any unavailable answer: ``to_leader``).
_READ_ONLY = frozenset({"Read", "List", "RangeScan"})
#: Oxia's refusals of a call by a server that is not (or not yet) the shard's leader: nothing applied.
_NOT_LEADER_TEXT = ("node is not leader", "not initialized")
#: The address gRPC names in a connection failure ("ipv4:127.0.0.1:6648: Tls handshake failed").
_PEER = re.compile(r"ipv[46]:\[?([0-9a-fA-F.:]+?)\]?:(\d+):")
#: Pause between two rounds of connection attempts while opening.
RETRY_PAUSE_SECONDS = 0.25
#: A listing or a range scan of a shard may take this many call timeouts (a big subtree).
LISTING_TIMEOUTS = 6


#: Pause between two tries of a call whose shard leader moved, unless the assignments change first.
LEADER_RETRY_SECONDS = 0.25


class LeaderMoved(StoreUnavailable):
    """The call reached no shard leader and nothing of it applied: the assignments named none
    (one being elected), the server named refused it as not (or not yet) the leader, or no
    connection to it could be made. Sent again to the shard's leader once there is one."""

    write_may_have_happened = False

    def __init__(self, message: str, path: str | None = None, *, unreachable: bool = False) -> None:
        super().__init__(message, path)
        self.unreachable = unreachable
        """No connection to the server could be made (rather than its refusal as not the leader)."""


class SessionNotFound(MetadataStoreError):
    """The server no longer knows a session (it expired): its ephemerals are gone."""


@dataclass(frozen=True)
class Shard:
    """One shard of the namespace: its id, its hash range and its leader's ``host:port``."""

    id: int
    min_hash: int
    max_hash: int
    leader: str


class Liveness:
    """What of the connection is down now (the assignment stream, a keep-alive, a notification
    stream); ``ConnectionLost`` once something has been down for ``grace`` seconds, ``Reconnected``
    when the last thing comes back after that.

    Each part follows a shard's new leader by itself (the assignments name it; a keep-alive goes
    to it; a notification stream resumes there after the last offset seen, so no change is
    missed): a member's loss in a cluster is over within a second or two, and callers told
    ConnectionLost would read everything again for nothing (the coordinator counts its watch
    broken). ``grace``: the store's keep-alive period; 0 tells at once."""

    def __init__(self, emit: Callable[[SessionEvent], None], grace: float = 0.0) -> None:
        self._emit = emit
        self._grace = grace
        self._down: set[Hashable] = set()
        self._told = False
        """ConnectionLost was emitted (and Reconnected not yet)."""
        self._timer: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        return not self._down

    def down(self, what: Hashable) -> None:
        was = not self._down
        self._down.add(what)
        if not was or self._told:
            return
        if self._grace <= 0:
            self._tell()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._grace, self._tell)

    def _tell(self) -> None:
        self._timer = None
        if self._down and not self._told:
            self._told = True
            self._emit(SessionEvent.CONNECTION_LOST)

    def up(self, what: Hashable) -> None:
        if what not in self._down:
            return
        self._down.discard(what)
        if self._down:
            return
        self.close()
        if self._told:
            self._told = False
            self._emit(SessionEvent.RECONNECTED)

    def close(self) -> None:
        """No ConnectionLost pending any more (the store closes, or everything is up)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class OxiaConnection:
    """The shard map of one namespace and a channel per leader; every RPC goes through ``call``."""

    def __init__(self, url: StoreURL, liveness: Liveness) -> None:
        self.url = url
        self.namespace = url.namespace or "default"
        self.timeout = url.call_timeout
        self.liveness = liveness
        self._credentials = channel_credentials(url)
        self.token = TokenSource(url)
        self._namespace_metadata = (("namespace", self.namespace),)
        self._metadata: tuple[tuple[str, str], ...] = self._namespace_metadata
        self._metadata_token: str | None = None
        self.closed = False
        self.shards: list[Shard] = []
        #: Set (and replaced) at each update of the assignments: what a call whose leader moved waits on.
        self._assigned = asyncio.Event()
        self._mins: list[int] = []
        self._channels: dict[str, tuple[grpc.aio.Channel, Any]] = {}
        self._assignments: asyncio.Task[None] | None = None
        self._stream: Any = None
        self._host_index = 0
        #: Waited for before every call while set: the notification streams being (re)started, so
        #: that a call made after a listener was added is followed by every later change.
        self.gate: asyncio.Event | None = None

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Every call's metadata: the namespace, and the bearer token as it reads now."""
        token = self.token.current()
        if token != self._metadata_token:
            self._metadata_token = token
            self._metadata = self._namespace_metadata + (
                (("authorization", f"Bearer {token}"),) if token else ())
        return self._metadata

    # ---- opening and the shard assignments ------------------------------------------------------

    async def open(self, deadline: float) -> None:
        """Take the shard assignments from the first host that answers, by ``deadline`` (the loop's
        clock), then keep following them in the background."""
        loop = asyncio.get_running_loop()
        hosts = self.url.hosts
        last: MetadataStoreError | None = None
        while True:
            for i in range(len(hosts)):
                budget = max((deadline - loop.time()) / (len(hosts) - i), 0.5)
                try:
                    stream = await self._first_assignments(i, budget)
                except AuthFailed:
                    raise
                except _NamespaceMissing as e:  # a configuration error: no retry, no other host
                    raise MetadataStoreError(str(e)) from None
                except MetadataStoreError as e:
                    last = e
                    continue
                self._host_index = i
                self._stream = stream
                self._assignments = loop.create_task(self._follow(stream), name=f"oxia-assignments {self.url}")
                return
            if "Connection refused" in str(last) or loop.time() + RETRY_PAUSE_SECONDS >= deadline:
                break
            await asyncio.sleep(RETRY_PAUSE_SECONDS)
        assert last is not None
        # a plaintext client on a TLS port sees its connection closed, nothing more
        hint = " (does it serve TLS only? tls=true)" if not self.url.tls and "Socket closed" in str(last) else ""
        raise StoreUnavailable(f"no oxia server answered at {self.url.host_string()} ({last}){hint}")

    async def _first_assignments(self, index: int, budget: float) -> Any:
        """The assignment stream on host ``index``, once its first answer was applied."""
        host, port = self.url.hosts[index]
        _, stub = self._channel(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        request = pb.ShardAssignmentsRequest(namespace=self.namespace)
        stream = open_stream(stub.GetShardAssignments, request, metadata=self.metadata)
        try:
            first = await asyncio.wait_for(stream.read(), budget)
            started(stream)
        except TimeoutError:
            await settle(stream)
            raise StoreUnavailable(f"oxia at {host}:{port} sent no shard assignments within {budget:.1f}s") from None
        except grpc.aio.AioRpcError as e:
            await settle(stream)
            raise self._translate(e, None) from None
        if first is grpc.aio.EOF:
            await settle(stream)
            raise StoreUnavailable(f"oxia at {host}:{port} ended the shard assignment stream")
        self._apply(first)
        return stream

    def _apply(self, assignments: Any) -> None:
        ns = assignments.namespaces.get(self.namespace)
        if ns is None:
            return  # an update of other namespaces only
        if ns.shard_key_router not in (pb.XXHASH3, pb.UNKNOWN):
            raise MetadataStoreError(f"oxia namespace {self.namespace} routes keys by an unknown hash")
        shards = sorted(
            (Shard(a.shard, a.int32_hash_range.min_hash_inclusive, a.int32_hash_range.max_hash_inclusive, a.leader)
             for a in ns.assignments),
            key=lambda s: s.min_hash,
        )
        self.shards = shards
        self._mins = [s.min_hash for s in shards]
        self._assigned.set()
        self._assigned = asyncio.Event()

    async def _follow(self, stream: Any) -> None:
        """Apply every later update of the assignments; when the stream breaks, report the
        connection lost and take the stream again from the first host that answers."""
        while not self.closed:
            try:
                while True:
                    update = await stream.read()
                    if update is grpc.aio.EOF:
                        break
                    self._apply(update)
            except asyncio.CancelledError:
                stream.cancel()
                raise
            except grpc.aio.AioRpcError as e:
                log.debug("%s: shard assignment stream broke: %s", self.url, self.token.scrub(e.details() or ""))
            except MetadataStoreError as e:
                log.warning("%s: %s", self.url, e)
            await settle(stream)
            if self.closed:
                return
            self.liveness.down("assignments")
            while not self.closed:
                n = len(self.url.hosts)
                for step in range(n):
                    index = (self._host_index + step) % n
                    try:
                        stream = await self._first_assignments(index, min(self.timeout, 5.0))
                    except MetadataStoreError as e:
                        log.debug("%s: no shard assignments from host %d: %s", self.url, index, e)
                        continue
                    self._host_index = index
                    self._stream = stream
                    break
                else:
                    await asyncio.sleep(0.5)
                    continue
                break
            self.liveness.up("assignments")

    def shard_for(self, key: str) -> Shard:
        """The shard that holds ``key``."""
        if not self.shards:
            raise StoreUnavailable("oxia: no shard assignments yet", key)
        h = key_hash(key)
        i = bisect.bisect_right(self._mins, h) - 1
        shard = self.shards[max(i, 0)]
        if not shard.min_hash <= h <= shard.max_hash:
            raise StoreUnavailable(f"oxia: no shard holds hash {h:#x} (assignments being updated)", key)
        return shard

    # ---- channels and calls ---------------------------------------------------------------------

    def _channel(self, target: str) -> tuple[grpc.aio.Channel, Any]:
        got = self._channels.get(target)
        if got is None:
            # every channel alike: the assignments name the other servers (their public
            # addresses), verified with the same CA, and their certificates must name them
            if self._credentials is None:
                channel = grpc.aio.insecure_channel(target, options=_GRPC_OPTIONS)
            else:
                channel = grpc.aio.secure_channel(target, self._credentials, options=_GRPC_OPTIONS)
            got = (channel, pb_grpc.OxiaClientStub(channel))
            self._channels[target] = got
        return got

    def stub(self, shard: Shard, path: str | None = None) -> Any:
        """The stub of ``shard``'s leader; ``StoreUnavailable`` while the assignments name none
        (the shard elects one after its leader's loss: gRPC made a channel to '' and failed the
        call as UNKNOWN, a plain error where a retry is due, logging its resolver's complaint)."""
        if not shard.leader:
            raise LeaderMoved(f"oxia: shard {shard.id} has no leader now (one is being elected)", path)
        return self._channel(shard.leader)[1]

    async def to_leader(self, path: str | None, shard: Shard, send: Callable[[Any], Awaitable[T]], *,
                        read_only: bool = False) -> T:
        """``send(stub)`` to ``shard``'s leader; while the leader moves (``LeaderMoved``: nothing
        applied), again to the leader the assignments name next, within the call timeout: an
        election is a pause for the caller, not its error (Oxia elects in about a second). A
        ``read_only`` call (it changes nothing wherever it got) goes again after any unavailable
        answer of a replicated cluster, the stream its leader's death cut short too."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            try:
                return await send(self.stub(shard, path))
            except StoreUnavailable as e:
                if not (isinstance(e, LeaderMoved) or read_only) or isinstance(e, StoreFull):
                    raise
                remaining = deadline - loop.time()
                unreachable = e.unreachable if isinstance(e, LeaderMoved) else True
                if remaining <= 0 or self.closed or (unreachable and not self._replicated()):
                    raise  # a standalone server that refuses: no other leader to wait for
                changed = self._assigned
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, LEADER_RETRY_SECONDS)):
                        await changed.wait()
                shard = next((s for s in self.shards if s.id == shard.id), shard)

    def _replicated(self) -> bool:
        """More than one server could lead a shard (the URL or the assignments name several)."""
        return len({s.leader for s in self.shards if s.leader} | set(self.url.host_string().split(","))) > 1

    async def call(self, path: str | None, fn: Callable[[], Awaitable[T]]) -> T:
        """Run one RPC, translating gRPC errors. Waits first while the notification streams are
        being started (``gate``)."""
        if self.closed:
            raise StoreUnavailable("store is closed", path)
        gate = self.gate
        if gate is not None and not gate.is_set():
            try:
                async with asyncio.timeout(self.timeout):
                    await gate.wait()
            except TimeoutError:
                pass  # the streams are late: the listeners will hear ConnectionLost from them
        try:
            return await fn()
        except grpc.aio.AioRpcError as e:
            # refused for its token: the file may have been rewritten within the last second (the
            # old token expired); the server refused before handling, so once more is safe
            if not (e.code() == grpc.StatusCode.UNAUTHENTICATED and self.token.refresh()):
                raise self._translate(e, path) from None
        try:
            return await fn()
        except grpc.aio.AioRpcError as e:
            raise self._translate(e, path) from None

    async def unary(self, path: str | None, method: str, shard: Shard, request: Any) -> Any:
        """One unary call (``Write``, ``CreateSession``, ...) to ``shard``'s leader."""
        return await self.to_leader(path, shard, lambda stub: self.call(
            path, lambda: getattr(stub, method)(request, timeout=self.timeout, metadata=self.metadata)))

    async def streamed(self, path: str | None, method: str, shard: Shard, request: Any) -> list[Any]:
        """Every answer of a server-streaming call (``Read``, ``List``, ``RangeScan``). A listing
        or a scan may be long: it gets ``LISTING_TIMEOUTS`` times the call timeout."""
        timeout = self.timeout * (1 if method == "Read" else LISTING_TIMEOUTS)

        async def send(stub: Any) -> list[Any]:
            async def run() -> list[Any]:
                return [answer async for answer in getattr(stub, method)(
                    request, timeout=timeout, metadata=self.metadata)]

            return await self.call(path, run)

        return await self.to_leader(path, shard, send, read_only=method in _READ_ONLY)

    def _translate(self, e: grpc.aio.AioRpcError, path: str | None) -> MetadataStoreError:
        code = e.code()
        details = self.token.scrub(e.details() or "")
        lower = details.lower()
        where = f"oxia at {self.url.host_string()}"
        if code == grpc.StatusCode.UNAUTHENTICATED:  # Oxia's OIDC check (an interceptor: nothing was done)
            return AuthFailed(self._rejected(where, details or "no reason given"), path)
        if code == grpc.StatusCode.UNAVAILABLE and (tls := tls_failure(details, self.url)) is not None:
            # the server that failed may be a shard leader the assignments named, not a URL host
            peer = _PEER.search(details)
            address = f"{peer.group(1)}:{peer.group(2)}" if peer is not None else None
            if address is not None and address not in self.url.host_string().split(","):
                where += f" (its server {address})"
            return AuthFailed(f"{where}: {tls}", path)
        if code == grpc.StatusCode.PERMISSION_DENIED and "unexpected authority" in lower:
            return AuthFailed(f"{where} knows itself by another address ({details}): name the servers as the "
                              "cluster's configuration does (its public addresses)", path)
        if "namespace not found" in lower:
            return _NamespaceMissing(f"{where} has no namespace {self.namespace!r}", path)
        if "session not found" in lower:
            return SessionNotFound(f"{where}: {details}", path)
        if any(t in lower for t in _NOT_LEADER_TEXT):
            return LeaderMoved(f"{where}: no shard leader took the call ({code.name}: {details})", path)
        if never_sent(e):
            return LeaderMoved(f"{where} unavailable ({code.name}: {details})", path, unreachable=True)
        if code in UNAVAILABLE_CODES or any(t in lower for t in _RETRYABLE_TEXT):
            return StoreUnavailable(f"{where} unavailable ({code.name}: {details})", path)
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return AuthFailed(f"{where} refused the call ({details})", path)
        return MetadataStoreError(f"oxia error {code.name}: {details}", path)

    def _rejected(self, where: str, why: str) -> str:
        """The line of a refused token: where the token came from, never what it is."""
        if self.token.path is not None:
            return f"{where} rejected the token of token_file {self.token.path} ({why})"
        if "token" in self.url.options:
            return f"{where} rejected the token of the URL ({why})"
        return f"{where} requires a bearer token, none given (token= or token_file=) ({why})"

    async def close(self) -> None:
        """Stop following the assignments, close every channel. Idempotent."""
        self.closed = True
        self.liveness.close()
        if self._assignments is not None:
            self._assignments.cancel()
            await asyncio.gather(self._assignments, return_exceptions=True)
            self._assignments = None
        if self._stream is not None:
            await settle(self._stream)
            self._stream = None
        channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            await channel.close()



def open_stream(start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A long-lived streaming call, ``start(*args, **kwargs)``, that ``started`` and ``settle``
    follow: gRPC makes a task of its own that waits for the call's status (a few loop turns after
    the call began), and after ``cancel`` that task ends only when gRPC's core confirmed, a few
    loop turns later again; a closed store must not leave it behind."""
    call = start(*args, **kwargs)
    call.metashift_before = asyncio.all_tasks()
    call.metashift_tasks = None
    return call


def _status_tasks(since: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    # by the coroutine's qualified name: the repr of a Cython coroutine (grpcio's) names no
    # function in newer Cython releases (3.2: "<_cython_3_2_8.coroutine object at 0x...>")
    return {t for t in asyncio.all_tasks() - since
            if "_handle_status_once_received" in getattr(t.get_coro(), "__qualname__", "")}


def started(call: Any) -> None:
    """``call`` answered: the status task gRPC made for it exists by now (it is made before the
    first answer is read); remember it (and any other made since ``open_stream``: the window is
    short, and waiting for a task that ends anyway costs nothing)."""
    if call.metashift_tasks is None:
        call.metashift_tasks = _status_tasks(call.metashift_before)


async def settle(call: Any) -> None:
    """Cancel a streaming call and wait (at most 2 s) until gRPC's status task for it ended."""
    call.cancel()
    tasks = call.metashift_tasks
    if tasks is None:
        tasks = _status_tasks(call.metashift_before)
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(call.code(), 2.0)
    pending = [t for t in tasks if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=2.0)


class _NamespaceMissing(MetadataStoreError):
    """The server has no such namespace (a configuration error: never retried)."""
