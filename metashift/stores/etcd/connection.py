"""The etcd connection: our own ``grpc.aio`` channel (aetcd's ``Client`` has neither TLS nor
reconnection) with the stubs and messages of ``aetcd.rpc`` (never a second copy of etcd's protos in
the process), host failover, token authentication and re-authentication, gRPC errors mapped onto
the store's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from aetcd import rpc

from .. import paths
from ..aio import cancelled_by_caller
from ..errors import AuthFailed, MetadataStoreError, StoreFull, StoreUnavailable
from ..grpc_errors import UNAVAILABLE_CODES, never_sent
from ..urls import StoreURL
from .keys import Keys

log = logging.getLogger(__name__)

T = TypeVar("T")
Metadata = tuple[tuple[str, str], ...] | None

_GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 512 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # reconnect fast after a server restart (gRPC's default backoff grows to 2 minutes)
    ("grpc.initial_reconnect_backoff_ms", 100),
    # not a backoff, despite its name: the least time a connection attempt gets to finish its
    # TCP and HTTP/2 handshake (gRPC's MIN_CONNECT_TIMEOUT). At 100 ms, attempts on a loaded
    # machine failed with "connection attempt timed out before receiving SETTINGS frame"
    ("grpc.min_reconnect_backoff_ms", 10_000),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # detect dead connections under the long-lived watch stream (etcd allows pings every 5 s)
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]


#: What etcd answers a call whose token no longer counts: a simple token lives ``--auth-token-ttl``
#: seconds (300 by default) after its last use, and a token issued before a change of users or roles
#: is refused as old. Either call was refused before it was applied: authenticating again and
#: sending it again is safe.
_STALE_TOKEN = ("invalid auth token", "revision of auth store is old")


def stale_token(details: str | None) -> bool:
    """etcd refused a call (or a watch) for its token only (``_STALE_TOKEN``)."""
    return any(s in (details or "") for s in _STALE_TOKEN)


def denied(details: str | None) -> bool:
    """etcd refused a call (or a watch) for the user's permissions (``etcdserver: permission
    denied``; ``auth: permission denied`` for what needs the root role)."""
    return "permission denied" in (details or "")


#: Pause between two rounds of connection attempts while opening.
RETRY_PAUSE_SECONDS = 0.25

class EtcdConnection:
    """A channel to one of the URL's etcd hosts, its stubs and auth token; every RPC goes through
    ``call``."""

    def __init__(self, url: StoreURL, keys: Keys) -> None:
        self.url = url
        self.keys = keys
        self.timeout = url.call_timeout
        self.host_index = 0
        self.channel: grpc.aio.Channel | None = None
        self.kv: Any = None
        self.maintenance: Any = None
        self.lease: Any = None
        self.watch: Any = None
        self.metadata: Metadata = None
        self.closed = False
        #: The highest revision an answer's header or a watch event showed: a watch started after it misses
        #: nothing that changed after any answer this connection had.
        self.revision = 0
        #: Set when a call finds the server unavailable or the lease gone: the keep-alive loop
        #: checks at once instead of at its next tick.
        self.poke = asyncio.Event()
        #: Called after a failover switched hosts (the watch stream must move too).
        self.on_failover: Callable[[], None] = lambda: None
        #: Held while authenticating again: the calls that found the token stale together wait for
        #: one new token (each Authenticate costs etcd a bcrypt of the password).
        self._auth_lock = asyncio.Lock()
        #: Held while failing over: the calls (and the lease loop) that found the same member gone
        #: wait for that one failover, then go to the new host.
        self._failover_lock = asyncio.Lock()

    async def open(self, deadline: float) -> None:
        """Connect to the first host that answers, by ``deadline`` (the loop's clock). Hosts that
        all refuse the connection fail it at once; a host that accepted it but did not finish the
        HTTP/2 handshake in time (a loaded machine) is tried again while the deadline allows."""
        loop = asyncio.get_running_loop()
        hosts = self.url.hosts
        last: MetadataStoreError | None = None
        while True:
            for i in range(len(hosts)):
                budget = max((deadline - loop.time()) / (len(hosts) - i), 0.5)
                try:
                    channel, metadata = await self._open(i, budget)
                except AuthFailed:
                    raise
                except MetadataStoreError as e:
                    last = e
                    continue
                self._install(i, channel, metadata)
                return
            if "Connection refused" in str(last) or loop.time() + RETRY_PAUSE_SECONDS >= deadline:
                break
            await asyncio.sleep(RETRY_PAUSE_SECONDS)
        assert last is not None
        raise StoreUnavailable(f"no etcd server answered at {self.url.host_string()} ({last})")

    async def close(self) -> None:
        """Close the channel. Idempotent."""
        self.closed = True
        if self.channel is not None:
            await self.channel.close()
            self.channel = None

    def _make_channel(self, index: int) -> grpc.aio.Channel:
        host, port = self.url.hosts[index]
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if not self.url.tls:
            return grpc.aio.insecure_channel(target, options=_GRPC_OPTIONS)

        def read(key: str) -> bytes | None:
            name = self.url.options.get(key)
            if name is None:
                return None
            with open(name, "rb") as f:
                return f.read()

        creds = grpc.ssl_channel_credentials(
            root_certificates=read("ca"), private_key=read("key"), certificate_chain=read("cert")
        )
        return grpc.aio.secure_channel(target, creds, options=_GRPC_OPTIONS)

    async def _open(self, index: int, budget: float) -> tuple[grpc.aio.Channel, Metadata]:
        """A channel to host ``index`` that answered an authenticated read of our root key."""
        channel = self._make_channel(index)
        try:
            metadata = await self._authenticate(channel, budget)
            kv = rpc.KVStub(channel)
            try:
                await kv.Range(
                    rpc.RangeRequest(key=self.keys.key(paths.SEPARATOR), count_only=True),
                    timeout=budget,
                    metadata=metadata,
                )
            except grpc.aio.AioRpcError as e:
                raise self._translate(e, None) from None
        except BaseException:
            await channel.close()
            raise
        return channel, metadata

    async def _authenticate(self, channel: grpc.aio.Channel, budget: float) -> Metadata:
        if self.url.username is None:
            return None
        try:
            resp = await rpc.AuthStub(channel).Authenticate(
                rpc.AuthenticateRequest(name=self.url.username, password=self.url.password or ""),
                timeout=budget,
            )
        except grpc.aio.AioRpcError as e:
            if e.code() in UNAVAILABLE_CODES:
                raise StoreUnavailable(f"etcd unreachable while authenticating ({e.details()})") from None
            if "authentication is not enabled" in (e.details() or ""):
                log.warning("%s: credentials given but etcd authentication is not enabled", self.url)
                return None
            raise AuthFailed(
                f"etcd at {self._host()} refused the credentials of user {self.url.username!r} for {self.keys.root}"
                f" ({e.details()})"
            ) from None
        return (("token", resp.token),)

    async def reauthenticate(self, used: Metadata) -> None:
        """A new token, when the one ``used`` is still the connection's: the calls that failed on
        the same stale token get one new token together."""
        async with self._auth_lock:
            if self.metadata is not used or self.channel is None or self.url.username is None:
                return  # another call got a new token meanwhile (or a failover did)
            log.info("%s: etcd's auth token of user %r expired; authenticating again", self.url, self.url.username)
            self.metadata = await self._authenticate(self.channel, self.timeout)

    def _install(self, index: int, channel: grpc.aio.Channel, metadata: Metadata) -> None:
        self.host_index = index
        self.channel = channel
        self.metadata = metadata
        self.kv = rpc.KVStub(channel)
        self.lease = rpc.LeaseStub(channel)
        self.watch = rpc.WatchStub(channel)
        self.maintenance = rpc.MaintenanceStub(channel)

    async def failover(self, away_from: grpc.aio.Channel | None = None) -> None:
        """Switch to the next host that answers, when the URL names several; with ``away_from``,
        only if the connection is still on that channel (one failover for the calls that found
        the same member gone together)."""
        async with self._failover_lock:
            if away_from is None or self.channel is away_from:
                await self._failover()

    async def _failover(self) -> None:
        n = len(self.url.hosts)
        if n < 2 or self.closed:
            return
        for step in range(1, n):
            index = (self.host_index + step) % n
            try:
                channel, metadata = await self._open(index, min(self.timeout, 2.0))
            except MetadataStoreError:
                continue
            if self.closed:
                await channel.close()
                return
            old = self.channel
            log.warning("%s: failing over to %s:%d", self.url, *self.url.hosts[index])
            self._install(index, channel, metadata)
            self.on_failover()
            if old is not None:
                await old.close()
            return

    # ---- calls ----------------------------------------------------------------------------------

    async def call(self, path: str | None, fn: Callable[[Metadata], Awaitable[T]], *, closing: bool = False,
                   read_only: bool = False) -> T:
        """Run one RPC (``fn(metadata)``), translating gRPC errors; authenticates again and sends
        it once more when etcd refused it for a stale token (``stale_token``). A call that found
        its member gone (``never_sent``; any unavailable answer for a ``read_only`` one, which
        changes nothing wherever it got) goes once more to the next member that answers, when
        the URL names several: a member's loss is not the caller's error. ``closing``: a call
        the store's close makes, after the connection was marked closed (revoking its lease)."""
        if self.closed and not closing:
            raise StoreUnavailable("store is closed", path)
        for attempt in range(2):
            used, channel = self.metadata, self.channel
            try:
                response = await fn(used)
            except grpc.aio.AioRpcError as e:
                if attempt == 0 and self.url.username is not None and stale_token(e.details()):
                    await self.reauthenticate(used)
                    continue
                gone = never_sent(e) or (read_only and e.code() in UNAVAILABLE_CODES)
                if attempt == 0 and gone and await self._moved_from(channel):
                    continue  # refused before it was sent: nothing applied, safe to send again
                raise self._translate(e, path) from None
            except asyncio.CancelledError:
                if cancelled_by_caller():
                    raise
                # a failover closed the channel the call was on: grpc.aio raises CancelledError
                # for it, which ended the caller's task (a writer stopped for good); the call's
                # outcome is unknown, as for any call a member's loss cut short
                self.poke.set()
                raise StoreUnavailable(f"etcd at {self._host()}: the call's channel was closed by a failover",
                                       path) from None
            header = getattr(response, "header", None)
            if header is not None and header.revision > self.revision:
                self.revision = header.revision
            return response
        raise AssertionError("unreachable")

    async def _moved_from(self, channel: grpc.aio.Channel | None) -> bool:
        """The connection is on another host than ``channel``'s now: failed over by this call (a
        member that refuses connections, the URL naming others) or by another meanwhile."""
        if len(self.url.hosts) < 2 or self.closed or channel is None:
            return False
        await self.failover(away_from=channel)
        return self.channel is not channel and self.channel is not None

    async def range(self, path: str | None, req: Any) -> Any:
        """One ``Range``."""
        return await self.call(path, lambda md: self.kv.Range(req, timeout=self.timeout, metadata=md), read_only=True)

    async def put(self, path: str | None, req: Any) -> Any:
        """One ``Put``."""
        return await self.call(path, lambda md: self.kv.Put(req, timeout=self.timeout, metadata=md))

    async def delete_range(self, path: str | None, req: Any) -> Any:
        """One ``DeleteRange``."""
        return await self.call(path, lambda md: self.kv.DeleteRange(req, timeout=self.timeout, metadata=md))

    async def txn(self, path: str | None, req: Any) -> Any:
        """One ``Txn``."""
        return await self.call(path, lambda md: self.kv.Txn(req, timeout=self.timeout, metadata=md))

    def _host(self) -> str:
        return "{}:{}".format(*self.url.hosts[self.host_index])

    def refusal(self, details: str) -> AuthFailed | None:
        """The ``AuthFailed`` of an answer refused for authentication or permission (one line naming
        the user and the prefix, never a secret); ``None`` for any other answer."""
        host, user, root = self._host(), self.url.username, self.keys.root
        if "auth: permission denied" in details:  # a maintenance call kept to the root role
            return AuthFailed(f"etcd at {host}: user {user!r} lacks etcd's root role for this call (etcd: {details})")
        if denied(details):
            return AuthFailed(
                f"etcd at {host}: permission denied to user {user!r} under {root}"
                f" (its role must grant readwrite on {self.keys.grants()}; etcd: {details})"
            )
        if "user name is empty" in details:
            return AuthFailed(f"etcd at {host} requires authentication: the URL names no user (etcd: {details})")
        if stale_token(details) or any(s in details for s in ("authentication failed", "user name not found")):
            return AuthFailed(f"etcd at {host} refused the token of user {user!r} for {root} (etcd: {details})")
        return None

    def _translate(self, e: grpc.aio.AioRpcError, path: str | None) -> MetadataStoreError:
        code = e.code()
        details = e.details() or ""
        host = self._host()
        if "database space exceeded" in details:
            return StoreFull(f"etcd at {host} is out of space (NOSPACE alarm: {details})", path)
        if code in UNAVAILABLE_CODES:
            self.poke.set()
            return StoreUnavailable(f"etcd at {host} unavailable ({code.name}: {details})", path)
        refused = self.refusal(details)
        if refused is None and code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            refused = AuthFailed(f"etcd at {host} refused user {self.url.username!r} under {self.keys.root}: {details}")
        if refused is not None:
            return AuthFailed(str(refused), path)
        if "lease not found" in details:
            self.poke.set()
            return StoreUnavailable(f"etcd session lease expired, being re-granted ({details})", path)
        return MetadataStoreError(f"etcd error {code.name}: {details}", path)
