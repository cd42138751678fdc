"""etcd backend (aetcd's generated gRPC stubs), in Pulsar's own ``EtcdMetadataStore`` layout.

After a migration Pulsar must be able to read etcd directly, so every rule here is the one of
pulsar-metadata's ``EtcdMetadataStore`` (jetcd):

- key = the node path, UTF-8; value = the raw bytes. When the store URL has a prefix
  (``etcd://h:2379/some/prefix``) every key starts with it (test isolation; Pulsar has none).
- ``Stat.version`` = etcd's per-key ``version`` - 1; no timestamps (0);
  ``ephemeral`` = the key has a lease, ``created_by_self`` = the lease is this store's.
  A put returns ``Stat.version`` = the previous kv's version (0 when the key was new), which is
  the new stored version - 1, and ``created_by_self=True`` as Pulsar does.
- put with ``expected_version`` -1: txn ``create_revision == 0``; ``n``: txn ``version == n+1``
  (also fails when the key is missing: ``BadVersion``); ``None``: a blind put.
- ephemeral nodes are put under this store's session lease (TTL = the URL's session timeout),
  kept alive by our own task and revoked by ``close()``.
- sequential puts (Pulsar's surprising rule, kept on purpose): first a *blind put of empty bytes*
  on the parent key (``paths.parent(path)``, ``/`` at top level) — which creates the parent key
  if it is missing and wipes its value if it had one — and the version of the previous kv it
  returns (0 when the parent key did not exist) is appended to ``path`` as a plain decimal, no
  zero padding: ``/ledgers/idgen/ID-`` → ``/ledgers/idgen/ID-17``. Then the real put.
  The counter is thus the parent key's etcd version (see ``children_version``).
- children = a keys-only prefix range on ``path + "/"``; the first segment after the prefix,
  deduplicated. A node can be deleted while it has "children" (there is no real tree), and
  parents are never created automatically.
- one watch on the whole prefix: Created (kv.version == 1) / Modified / Deleted, plus
  ChildrenChanged of the parent on create and delete (Pulsar's ``handleWatchResponse``).

Transport: our own ``grpc.aio`` channel (aetcd's ``Client`` has neither TLS nor reconnection),
the stubs and messages of ``aetcd.rpc`` (never a second copy of etcd's protos in the process),
our own lease keep-alive task, host failover, token re-authentication and watch resumption.
``raw_client()`` hands out an ``aetcd.Client`` bound to the same channel for the bulk copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import Any, TypeVar

import aetcd
import grpc
from aetcd import rpc
from aetcd import watcher as aetcd_watcher

from . import paths
from .aio import cancel_and_wait
from .base import (
    DeleteOp,
    ExistsOp,
    GetChildrenOp,
    GetOp,
    GetResult,
    MetadataStore,
    NodeInfo,
    Notification,
    NotificationType,
    Op,
    OpResult,
    PutOp,
    Restore,
    SessionEvent,
    Stat,
)
from .errors import (
    AlreadyExists,
    AuthFailed,
    BadVersion,
    InvalidStoreURL,
    MetadataStoreError,
    NotFound,
    StoreFull,
    StoreUnavailable,
    ValueTooLarge,
)
from .urls import StoreURL

log = logging.getLogger(__name__)

T = TypeVar("T")
Metadata = tuple[tuple[str, str], ...] | None

#: etcd's default ``--max-request-bytes`` (1.5 MiB).
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
#: Largest value we accept: a put of exactly this many bytes fits in a default server's request
#: limit with 16 KiB left for the key and the request's framing.
MAX_VALUE_SIZE = ETCD_MAX_REQUEST_BYTES - 16 * 1024
#: etcd's default ``--max-txn-ops``.
TXN_MAX_OPS = 128
#: Budget of one batch txn (keys + values + framing), under the server's request limit.
TXN_MAX_BYTES = MAX_VALUE_SIZE
#: Rough framing cost of one operation inside a txn.
_OP_OVERHEAD = 64
#: Keys per page when listing children.
CHILDREN_PAGE = 10_000
#: Concurrent txns / reads a single batch keeps in flight.
_BATCH_TXNS_IN_FLIGHT = 8
_BATCH_READS_IN_FLIGHT = 256
#: Smallest lease TTL we ask for (etcd raises shorter ones to its own minimum anyway).
MIN_LEASE_TTL = 2

_GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 512 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # reconnect fast after a server restart (gRPC's default backoff grows to 2 minutes)
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # detect dead connections under the long-lived watch stream (etcd allows pings every 5 s)
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]

_UNAVAILABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}


def _prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    b = bytearray(prefix)
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return b"\x00"  # the whole key space


class EtcdStore(MetadataStore):
    """A ``MetadataStore`` on etcd v3, with Pulsar's ``EtcdMetadataStore`` layout (module doc)."""

    max_value_size = MAX_VALUE_SIZE

    def __init__(self, url: StoreURL) -> None:
        super().__init__(url)
        self._prefix = "" if url.root == paths.SEPARATOR else url.root
        self._timeout = url.call_timeout
        self._ttl = max(MIN_LEASE_TTL, math.ceil(url.session_timeout))
        self._host_index = 0
        self._channel: grpc.aio.Channel | None = None
        self._kv: Any = None
        self._lease: Any = None
        self._watch_stub: Any = None
        self._metadata: Metadata = None
        self._lease_id = 0
        self._closed = False
        self._tasks: list[asyncio.Task[None]] = []
        self._poke = asyncio.Event()
        self._watch_ready = asyncio.Event()
        self._watch_call: Any = None
        self._watch_next_rev = 0
        self._connected = True
        self._watch_enabled = True
        # txn budgets of the bulk operations; they shrink when the server's limits are lower
        self._txn_ops = TXN_MAX_OPS
        self._txn_bytes = TXN_MAX_BYTES

    # ---- life cycle -----------------------------------------------------------------------------

    @classmethod
    async def connect(cls, url: StoreURL, *, watch: bool = True) -> EtcdStore:
        """Connect to the first host of ``url`` that answers, grant the session lease and start
        the watch and the keep-alive. ``StoreUnavailable`` within about ``url.call_timeout`` when
        no host answers; ``AuthFailed`` when the credentials are refused. ``watch=False`` skips
        the watch (no notifications), for bulk jobs that do not want every write streamed back."""
        if url.scheme != "etcd":
            raise InvalidStoreURL(f"not an etcd URL: {url}")
        store = cls(url)
        store._watch_enabled = watch
        try:
            await store._start()
        except BaseException:
            await store._shutdown(revoke=False)
            raise
        return store

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        hosts = self.url.hosts
        last: MetadataStoreError | None = None
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
            break
        else:
            assert last is not None
            raise StoreUnavailable(f"no etcd server answered at {self.url.host_string()} ({last})")
        try:
            await self._grant_lease()
        except StoreFull:
            if self._watch_enabled:
                raise
            # A bulk reader (a verification) needs no lease, and an etcd out of space still serves
            # reads; ephemeral puts are refused until the keep-alive loop gets a lease.
            log.warning("%s: no session lease (etcd is out of space); reads only", self.url)
        if self._watch_enabled:
            self._tasks.append(asyncio.create_task(self._watch_loop(), name=f"etcd-watch {self.url}"))
            try:
                await asyncio.wait_for(self._watch_ready.wait(), max(deadline - loop.time(), 1.0))
            except TimeoutError:
                raise StoreUnavailable(f"etcd at {self.url.host_string()} did not set up the watch") from None
        self._tasks.append(asyncio.create_task(self._keepalive_loop(), name=f"etcd-keepalive {self.url}"))

    async def close(self) -> None:
        """Stop the tasks, revoke the session lease (our ephemerals vanish at once), close the
        channel. Idempotent."""
        await self._shutdown(revoke=True)

    async def _shutdown(self, revoke: bool) -> None:
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._tasks, str(self.url))
        self._tasks.clear()
        if revoke and self._lease_id and self._lease is not None:
            try:
                await self._lease.LeaseRevoke(
                    rpc.LeaseRevokeRequest(ID=self._lease_id),
                    timeout=min(self._timeout, 3.0),
                    metadata=self._metadata,
                )
            except grpc.aio.AioRpcError as e:
                log.warning("%s: could not revoke lease %x on close: %s", self.url, self._lease_id, e.details())
        self._lease_id = 0
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    # ---- connection -----------------------------------------------------------------------------

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
                    rpc.RangeRequest(key=self._key(paths.SEPARATOR), count_only=True),
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
            if e.code() in _UNAVAILABLE_CODES:
                raise StoreUnavailable(f"etcd unreachable while authenticating ({e.details()})") from None
            if "authentication is not enabled" in (e.details() or ""):
                log.warning("%s: credentials given but etcd authentication is not enabled", self.url)
                return None
            raise AuthFailed(f"etcd refused the credentials of user {self.url.username!r} ({e.details()})") from None
        return (("token", resp.token),)

    def _install(self, index: int, channel: grpc.aio.Channel, metadata: Metadata) -> None:
        self._host_index = index
        self._channel = channel
        self._metadata = metadata
        self._kv = rpc.KVStub(channel)
        self._lease = rpc.LeaseStub(channel)
        self._watch_stub = rpc.WatchStub(channel)

    async def _failover(self) -> None:
        """Switch to the next host that answers, when the URL names several."""
        n = len(self.url.hosts)
        if n < 2 or self._closed:
            return
        for step in range(1, n):
            index = (self._host_index + step) % n
            try:
                channel, metadata = await self._open(index, min(self._timeout, 2.0))
            except MetadataStoreError:
                continue
            if self._closed:
                await channel.close()
                return
            old = self._channel
            log.warning("%s: failing over to %s:%d", self.url, *self.url.hosts[index])
            self._install(index, channel, metadata)
            if self._watch_call is not None:
                self._watch_call.cancel()
            if old is not None:
                await old.close()
            return

    async def _call(self, path: str | None, fn: Callable[[Metadata], Awaitable[T]]) -> T:
        """Run one RPC (``fn(metadata)``), translating gRPC errors; re-authenticates once when the
        auth token expired."""
        if self._closed:
            raise StoreUnavailable("store is closed", path)
        for attempt in range(2):
            try:
                return await fn(self._metadata)
            except grpc.aio.AioRpcError as e:
                if (
                    attempt == 0
                    and self.url.username is not None
                    and self._channel is not None
                    and e.code() == grpc.StatusCode.UNAUTHENTICATED
                    and "token" in (e.details() or "")
                ):
                    self._metadata = await self._authenticate(self._channel, self._timeout)
                    continue
                raise self._translate(e, path) from None
        raise AssertionError("unreachable")

    def _translate(self, e: grpc.aio.AioRpcError, path: str | None) -> MetadataStoreError:
        code = e.code()
        details = e.details() or ""
        host = "{}:{}".format(*self.url.hosts[self._host_index])
        if "database space exceeded" in details:
            return StoreFull(f"etcd at {host} is out of space (NOSPACE alarm: {details})", path)
        if code in _UNAVAILABLE_CODES:
            self._poke.set()
            return StoreUnavailable(f"etcd at {host} unavailable ({code.name}: {details})", path)
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or any(
            s in details for s in ("user name is empty", "authentication failed", "permission denied")
        ):
            return AuthFailed(f"etcd at {host} refused the call ({details})", path)
        if "lease not found" in details:
            self._poke.set()
            return StoreUnavailable(f"etcd session lease expired, being re-granted ({details})", path)
        return MetadataStoreError(f"etcd error {code.name}: {details}", path)

    # ---- the session lease ----------------------------------------------------------------------

    async def _grant_lease(self) -> None:
        resp = await self._call(
            None,
            lambda md: self._lease.LeaseGrant(rpc.LeaseGrantRequest(TTL=self._ttl), timeout=self._timeout, metadata=md),
        )
        if resp.error:
            raise MetadataStoreError(f"etcd refused a lease: {resp.error}")
        self._lease_id = resp.ID

    async def _revoke(self, lease_id: int) -> None:
        req = rpc.LeaseRevokeRequest(ID=lease_id)
        await self._call(None, lambda md: self._lease.LeaseRevoke(req, timeout=self._timeout, metadata=md))

    async def _range(self, path: str | None, req: Any) -> Any:
        return await self._call(path, lambda md: self._kv.Range(req, timeout=self._timeout, metadata=md))

    async def _keepalive_once(self) -> int:
        """Refresh the lease once; its remaining TTL (0 when etcd no longer knows it)."""
        lease_id = self._lease_id

        async def refresh(md: Metadata) -> int:
            call = self._lease.LeaseKeepAlive(
                iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]), timeout=self._timeout, metadata=md
            )
            async for reply in call:
                return int(reply.TTL)
            return 0

        return await self._call(None, refresh)

    async def _keepalive_loop(self) -> None:
        """Refresh the lease every TTL/3; report ConnectionLost/Reconnected, and SessionLost /
        SessionReestablished when the lease is gone (etcd says so, or we could not refresh it for
        longer than its TTL) and a new one was granted. Also fails over to another host."""
        last_ok = time.monotonic()
        session_lost = False
        while not self._closed:
            if self._connected:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._poke.wait(), self._ttl / 3)
            else:
                await asyncio.sleep(0.5)
            self._poke.clear()
            try:
                ttl = await self._keepalive_once() if self._lease_id else 0
            except asyncio.CancelledError:
                raise
            except MetadataStoreError as e:
                log.debug("%s: lease keep-alive failed: %s", self.url, e)
                if self._connected:
                    self._connected = False
                    self._session_event(SessionEvent.CONNECTION_LOST)
                if not session_lost and time.monotonic() - last_ok > self._ttl:
                    session_lost = True
                    self._session_event(SessionEvent.SESSION_LOST)
                await self._failover()
                continue
            except Exception:
                log.exception("%s: lease keep-alive failed", self.url)
                continue
            last_ok = time.monotonic()
            if not self._connected:
                self._connected = True
                self._session_event(SessionEvent.RECONNECTED)
            if ttl > 0 and not session_lost:
                continue
            if not session_lost:
                session_lost = True
                self._session_event(SessionEvent.SESSION_LOST)
            old = self._lease_id
            self._lease_id = 0
            if old:  # lost locally: etcd may still hold it (a restart renews leases); drop it
                with contextlib.suppress(MetadataStoreError):
                    await self._revoke(old)
            try:
                await self._grant_lease()
            except MetadataStoreError as e:
                log.warning("%s: could not re-grant the session lease: %s", self.url, e)
                continue
            session_lost = False
            last_ok = time.monotonic()
            self._session_event(SessionEvent.SESSION_REESTABLISHED)

    # ---- the watch ------------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        """One watch on our whole key space, resumed after the last revision seen whenever the
        stream breaks (server restart, failover), so no event is lost unless compacted."""
        start = self._key(paths.SEPARATOR)
        end = _prefix_end((self._prefix + paths.SEPARATOR).encode())
        while not self._closed:
            call = None
            try:
                call = self._watch_stub.Watch(metadata=self._metadata)
                self._watch_call = call
                await call.write(
                    rpc.WatchRequest(
                        create_request=rpc.WatchCreateRequest(
                            key=start, range_end=end, start_revision=self._watch_next_rev
                        )
                    )
                )
                while True:
                    resp = await call.read()
                    if resp is grpc.aio.EOF:
                        break
                    if resp.created and self._watch_next_rev == 0:
                        self._watch_next_rev = resp.header.revision + 1
                    if resp.created:
                        self._watch_ready.set()
                    if resp.compact_revision:
                        log.warning(
                            "%s: watch resumed after compaction at revision %d; changes in between were missed",
                            self.url,
                            resp.compact_revision,
                        )
                        self._watch_next_rev = resp.compact_revision
                    for event in resp.events:
                        self._on_event(event)
                        self._watch_next_rev = max(self._watch_next_rev, event.kv.mod_revision + 1)
                    if resp.canceled:
                        if resp.cancel_reason:
                            log.warning("%s: watch canceled: %s", self.url, resp.cancel_reason)
                        break
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except grpc.aio.AioRpcError as e:
                if not self._closed and e.code() != grpc.StatusCode.CANCELLED:
                    log.debug("%s: watch stream broke: %s", self.url, e.details())
                    self._poke.set()
            except Exception:
                log.exception("%s: watch failed", self.url)
            finally:
                self._watch_call = None
            if call is not None:
                call.cancel()
            if not self._closed:
                await asyncio.sleep(0.5)

    def _on_event(self, event: Any) -> None:
        path = self._path_of(event.kv.key)
        if path is None:
            return
        if event.type == rpc.Event.PUT:
            if event.kv.version == 1:
                self._notify(Notification(NotificationType.CREATED, path))
                self._notify_parent(path)
            else:
                self._notify(Notification(NotificationType.MODIFIED, path))
        else:
            self._notify(Notification(NotificationType.DELETED, path))
            self._notify_parent(path)

    def _notify_parent(self, path: str) -> None:
        parent = paths.parent(path)
        if parent is not None:
            self._notify(Notification(NotificationType.CHILDREN_CHANGED, parent))

    # ---- keys -----------------------------------------------------------------------------------

    def _key(self, path: str) -> bytes:
        """The etcd key of ``path``: the path itself, after the URL's prefix if any."""
        if path == paths.SEPARATOR:
            return (self._prefix or paths.SEPARATOR).encode()
        return (self._prefix + path).encode()

    def key_of(self, path: str) -> bytes:
        """The etcd key that holds ``path`` (public, for the bulk copy)."""
        return self._key(paths.validate(path))

    def _path_of(self, key: bytes) -> str | None:
        try:
            text = key.decode()
        except UnicodeDecodeError:
            return None
        if not self._prefix:
            return text if text.startswith(paths.SEPARATOR) else None
        if text == self._prefix:
            return paths.SEPARATOR
        if text.startswith(self._prefix + paths.SEPARATOR):
            return text[len(self._prefix) :]
        return None

    def _children_prefix(self, path: str) -> bytes:
        if path == paths.SEPARATOR:
            return (self._prefix + paths.SEPARATOR).encode()
        return (self._prefix + path + paths.SEPARATOR).encode()

    def _stat(self, path: str, kv: Any) -> Stat:
        return Stat(
            path,
            kv.version - 1,
            0,
            0,
            ephemeral=kv.lease != 0,
            created_by_self=kv.lease != 0 and kv.lease == self._lease_id,
        )

    def _session_lease(self, path: str) -> int:
        if not self._lease_id:
            self._poke.set()
            raise StoreUnavailable("etcd session lease lost, being re-granted; ephemeral put refused", path)
        return self._lease_id

    # ---- reads ----------------------------------------------------------------------------------

    async def _get(self, path: str) -> GetResult:
        req = rpc.RangeRequest(key=self._key(path))
        resp = await self._call(path, lambda md: self._kv.Range(req, timeout=self._timeout, metadata=md))
        if not resp.kvs:
            return None
        kv = resp.kvs[0]
        return bytes(kv.value), self._stat(path, kv)

    async def _exists(self, path: str) -> bool:
        req = rpc.RangeRequest(key=self._key(path), count_only=True)
        resp = await self._call(path, lambda md: self._kv.Range(req, timeout=self._timeout, metadata=md))
        return bool(resp.count > 0)

    async def _get_children(self, path: str) -> list[str]:
        """Keys-only prefix range on ``path/``, paged at one pinned revision; the first segment of
        each key after the prefix, deduplicated. Pages skip the subtree of the last child seen."""
        prefix = self._children_prefix(path)
        end = _prefix_end(prefix)
        start = prefix
        revision = 0
        names: set[str] = set()
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, keys_only=True, limit=CHILDREN_PAGE, revision=revision)
            resp = await self._range(path, req)
            if not revision:
                revision = resp.header.revision
            if not resp.kvs:
                break
            for kv in resp.kvs:
                name = kv.key[len(prefix) :].split(b"/", 1)[0]
                if name:  # the key of the parent "/" itself, when there is no prefix
                    names.add(name.decode(errors="replace"))
            if not resp.more:
                break
            last = resp.kvs[-1].key
            rest = last[len(prefix) :]
            if b"/" in rest:  # skip the rest of that child's subtree: "name/" < ... < "name0"
                start = prefix + rest.split(b"/", 1)[0] + b"0"
            else:
                start = last + b"\x00"
        return sorted(names)

    async def children_version(self, path: str) -> int | None:
        """The stored etcd version of the key of ``path``: the counter behind sequential children of
        ``path`` (the next sequential put under ``path`` gets this number as its suffix, 0 when
        ``None``, the key being absent). For the bulk copy, to carry counters over."""
        req = rpc.RangeRequest(key=self._key(paths.validate(path)))
        resp = await self._call(path, lambda md: self._kv.Range(req, timeout=self._timeout, metadata=md))
        return int(resp.kvs[0].version) if resp.kvs else None

    # ---- writes ---------------------------------------------------------------------------------

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        if sequential:
            # Pulsar: a blind put of empty bytes on the parent; its previous version is the suffix
            parent = paths.parent(path) or paths.SEPARATOR
            counter = await self._put_one(parent, b"", None, False)
            path = path + str(counter.version)
        return await self._put_one(path, value, expected_version, ephemeral)

    async def _put_one(self, path: str, value: bytes, expected_version: int | None, ephemeral: bool) -> Stat:
        key = self._key(path)
        lease = self._session_lease(path) if ephemeral else 0
        put = rpc.PutRequest(key=key, value=value, lease=lease, prev_kv=True)
        if expected_version is None:
            resp = await self._call(path, lambda md: self._kv.Put(put, timeout=self._timeout, metadata=md))
            return self._put_stat(path, resp, ephemeral)
        txn = rpc.TxnRequest(
            compare=[self._compare(key, expected_version)], success=[rpc.RequestOp(request_put=put)], failure=[]
        )
        resp = await self._call(path, lambda md: self._kv.Txn(txn, timeout=self._timeout, metadata=md))
        if not resp.succeeded:
            raise AlreadyExists(path) if expected_version == -1 else BadVersion(path)
        return self._put_stat(path, resp.responses[0].response_put, ephemeral)

    @staticmethod
    def _compare(key: bytes, expected_version: int) -> Any:
        if expected_version == -1:
            return rpc.Compare(key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.CREATE, create_revision=0)
        return rpc.Compare(key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.VERSION, version=expected_version + 1)

    @staticmethod
    def _put_stat(path: str, put_response: Any, ephemeral: bool) -> Stat:
        # Pulsar: version = prevKv.version, 0 without one; createdBySelf always true
        version = put_response.prev_kv.version if put_response.HasField("prev_kv") else 0
        return Stat(path, int(version), 0, 0, ephemeral=ephemeral, created_by_self=True)

    async def _delete(self, path: str, expected_version: int | None) -> None:
        key = self._key(path)
        if expected_version is None:
            req = rpc.DeleteRangeRequest(key=key)
            resp = await self._call(path, lambda md: self._kv.DeleteRange(req, timeout=self._timeout, metadata=md))
            if resp.deleted == 0:
                raise NotFound(path)
            return
        txn = rpc.TxnRequest(
            compare=[self._compare(key, expected_version)],
            success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key, count_only=True))],
        )
        resp = await self._call(path, lambda md: self._kv.Txn(txn, timeout=self._timeout, metadata=md))
        if not resp.succeeded:
            if resp.responses[0].response_range.count == 0:
                raise NotFound(path)
            raise BadVersion(path)

    # ---- batches --------------------------------------------------------------------------------

    async def _batch(self, ops: list[Op]) -> list[OpResult]:
        """Plain puts and deletes go in txns (at most 128 distinct keys, under the request limit),
        with Pulsar's fallback to single calls when a txn fails (a compare failed, a repeated key,
        too large); gets and exists go in read-only txns of 128; children listings and sequential
        puts run as pipelined single calls. The paths are distinct (``batch`` hands over one
        operation per path at a time), so every txn holds distinct keys and all run concurrently."""
        results: list[OpResult] = [None] * len(ops)
        singles_sem = asyncio.Semaphore(_BATCH_READS_IN_FLIGHT)
        txn_sem = asyncio.Semaphore(_BATCH_TXNS_IN_FLIGHT)

        async def single(i: int, op: Op) -> None:
            async with singles_sem:
                results[i] = await self._run_one(op)

        async def txn(chunk: list[tuple[int, Op]]) -> None:
            async with txn_sem:
                await self._txn_chunk(chunk, results)

        writes: list[list[tuple[int, Op]]] = [[]]
        chunk_bytes = 0
        reads: list[list[tuple[int, Op]]] = [[]]
        singles: list[tuple[int, Op]] = []
        for i, op in enumerate(ops):
            if isinstance(op, GetChildrenOp) or (isinstance(op, PutOp) and op.sequential):
                singles.append((i, op))
                continue
            if isinstance(op, GetOp | ExistsOp):
                if len(reads[-1]) >= TXN_MAX_OPS:
                    reads.append([])
                reads[-1].append((i, op))
                continue
            size = len(self._key(op.path)) + (len(op.value) if isinstance(op, PutOp) else 0) + _OP_OVERHEAD
            if writes[-1] and (len(writes[-1]) >= TXN_MAX_OPS or chunk_bytes + size > TXN_MAX_BYTES):
                writes.append([])
                chunk_bytes = 0
            writes[-1].append((i, op))
            chunk_bytes += size

        await asyncio.gather(*(txn(chunk) for chunk in writes + reads if chunk), *(single(i, op) for i, op in singles))
        return results

    async def _txn_chunk(self, chunk: list[tuple[int, Op]], results: list[OpResult]) -> None:
        if len(chunk) == 1:
            results[chunk[0][0]] = await self._run_one(chunk[0][1])
            return
        compare = []
        success = []
        try:
            for _, op in chunk:
                key = self._key(op.path)
                if isinstance(op, GetOp):
                    success.append(rpc.RequestOp(request_range=rpc.RangeRequest(key=key)))
                elif isinstance(op, ExistsOp):
                    success.append(rpc.RequestOp(request_range=rpc.RangeRequest(key=key, count_only=True)))
                elif isinstance(op, PutOp):
                    if op.expected_version is not None:
                        compare.append(self._compare(key, op.expected_version))
                    lease = self._session_lease(op.path) if op.ephemeral else 0
                    put = rpc.PutRequest(key=key, value=op.value, lease=lease, prev_kv=True)
                    success.append(rpc.RequestOp(request_put=put))
                else:
                    assert isinstance(op, DeleteOp)
                    if op.expected_version is not None:
                        compare.append(self._compare(key, op.expected_version))
                    success.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key)))
            request = rpc.TxnRequest(compare=compare, success=success, failure=[])
            resp = await self._call(None, lambda md: self._kv.Txn(request, timeout=self._timeout, metadata=md))
        except (StoreUnavailable, AuthFailed) as e:
            # a write txn may or may not have been applied: report, do not retry
            for i, op in chunk:
                results[i] = type(e)(str(e), op.path)
            return
        except MetadataStoreError as e:  # repeated key, request or response too large, ...
            log.debug("%s: batch txn failed (%s); running its %d ops one by one", self.url, e, len(chunk))
            resp = None
        if resp is None or not resp.succeeded:
            singles = await asyncio.gather(*(self._run_one(op) for _, op in chunk))
            for (i, _), result in zip(chunk, singles, strict=True):
                results[i] = result
            return
        for (i, op), r in zip(chunk, resp.responses, strict=True):
            if isinstance(op, GetOp):
                kvs = r.response_range.kvs
                results[i] = (bytes(kvs[0].value), self._stat(op.path, kvs[0])) if kvs else None
            elif isinstance(op, ExistsOp):
                results[i] = r.response_range.count > 0
            elif isinstance(op, PutOp):
                results[i] = self._put_stat(op.path, r.response_put, op.ephemeral)
            else:
                results[i] = NotFound(op.path) if r.response_delete_range.deleted == 0 else None

    # ---- extras for the bulk copy ---------------------------------------------------------------

    @property
    def lease_id(self) -> int:
        """The session lease's id (0 while it is being re-granted)."""
        return self._lease_id

    def raw_client(self) -> aetcd.Client:
        """An ``aetcd.Client`` sharing this store's channel, auth token and prefix-less key space,
        for bulk work (the copy). Keys are raw: build them with ``key_of``. Do not ``close()`` it
        (that would close the store's channel); it is invalid after a failover or ``close()``."""
        if self._channel is None:
            raise StoreUnavailable("store is closed")
        host, port = self.url.hosts[self._host_index]
        client = aetcd.Client(host, port, timeout=self._timeout)
        client.channel = self._channel
        client.metadata = self._metadata
        client.kvstub = rpc.KVStub(self._channel)
        client.clusterstub = rpc.ClusterStub(self._channel)
        client.leasestub = rpc.LeaseStub(self._channel)
        client.maintenancestub = rpc.MaintenanceStub(self._channel)
        client._watcher = aetcd_watcher.Watcher(
            rpc.WatchStub(self._channel), timeout=self._timeout, metadata=self._metadata
        )
        client._connected.set()
        return client

    # ---- bulk operations (the copy, its verification, sample data) ------------------------------
    # Overrides of the generic ``MetadataStore`` implementations, for speed.

    async def walk(
        self, root: str = paths.SEPARATOR, *, prune: Collection[str] = ()
    ) -> AsyncIterator[list[NodeInfo]]:
        """One range scan over the keys below ``root``, paged, at one pinned revision; key
        order puts every parent before its children."""
        paths.validate(root)
        prefix = self._children_prefix(root)
        end = _prefix_end(prefix)
        pruned = tuple(prune)
        start = prefix
        revision = 0
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, limit=WALK_PAGE_KEYS, revision=revision)
            resp = await self._range(root, req)
            if not revision:
                revision = resp.header.revision
            page = []
            for kv in resp.kvs:
                path = self._path_of(kv.key)
                if path is None or path == paths.SEPARATOR or any(paths.is_under(path, p) for p in pruned):
                    continue
                page.append(NodeInfo(path, kv.version - 1, len(kv.value), kv.lease != 0))
            if page:
                yield page
            if not resp.more or not resp.kvs:
                return
            start = resp.kvs[-1].key + b"\x00"

    async def restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        """Keeping version V takes V+1 puts of the key, each in its own txn (etcd refuses a key
        twice in one txn). The intermediate puts are blind puts of empty bytes, and since only
        their number matters they go in parallel: packed so that every txn holds distinct keys
        and stays within the server's op and size limits (learnt when the server refuses a
        txn: the budgets shrink and the txn is split). Then one final put per node with its
        value, conditional on the version the intermediate puts must have left, so a count gone
        wrong is a ``BadVersion``, never a wrong version. A final txn whose compare fails is
        redone key by key to find the culprits."""
        for item in items:
            self._check_put(item.path, item.value, None)
            if not 0 <= item.version or not -1 <= item.current <= item.version:
                raise ValueError(f"cannot restore {item.path} from version {item.current} to {item.version}")
        results: list[int | MetadataStoreError] = [0] * len(items)
        todo = [i for i, item in enumerate(items) if item.current < item.version]
        if not todo:
            return results
        keys = {i: self._key(items[i].path) for i in todo}
        # -- intermediate puts: key i needs (version - current - 1) of them, in distinct txns
        need = {i: items[i].version - items[i].current - 1 for i in todo}
        failed: dict[int, MetadataStoreError] = {}
        await self._blind_puts([(keys[i], b"", n, i) for i, n in need.items() if n > 0], failed)
        # -- final puts, with the value, conditional on the version left by the puts before
        finals = [i for i in todo if i not in failed]

        def final_put(i: int) -> tuple[Any, Any]:
            item = items[i]
            put = rpc.RequestOp(request_put=rpc.PutRequest(key=keys[i], value=item.value))
            return self._compare(keys[i], item.version - 1), put

        chunks = self._pack([(i, len(keys[i]) + len(items[i].value)) for i in finals])
        sem = asyncio.Semaphore(_BATCH_TXNS_IN_FLIGHT)

        async def run_final(chunk: list[int]) -> None:
            ops = [final_put(i) for i in chunk]
            request = rpc.TxnRequest(compare=[c for c, _ in ops], success=[p for _, p in ops], failure=[])
            async with sem:
                try:
                    resp = await self._txn(request)
                    too_big = False
                except _TxnTooBig:
                    too_big = True
                except MetadataStoreError as e:  # unavailable, full, ...: whether applied is unknown
                    for i in chunk:
                        failed[i] = e
                    return
            if not too_big and resp.succeeded:
                return
            if len(chunk) == 1:
                item = items[chunk[0]]
                failed[chunk[0]] = (
                    ValueTooLarge(item.path, len(item.value), self._txn_bytes)
                    if too_big
                    else BadVersion(item.path, "its version moved while it was restored")
                )
                return
            if too_big:
                half = len(chunk) // 2
                await asyncio.gather(run_final(chunk[:half]), run_final(chunk[half:]))
            else:  # a compare failed: find which, key by key
                await asyncio.gather(*(run_final([i]) for i in chunk))

        await asyncio.gather(*(run_final(chunk) for chunk in chunks))
        for i in todo:
            results[i] = failed[i] if i in failed else items[i].version - items[i].current
        return results

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """The counter is the parent key's version: blind puts of its own value, in parallel
        (their order does not matter, all write the same bytes), until it reaches ``at_least``."""
        paths.validate(parent)
        counter = await self.sequence_counter(parent)
        if counter >= at_least:
            return 0
        current = await self.get(parent)
        value = current[0] if current is not None else b""
        put = rpc.PutRequest(key=self._key(parent), value=value)
        need = at_least - counter
        sem = asyncio.Semaphore(_COUNTER_PUTS_IN_FLIGHT)

        async def one() -> None:
            async with sem:
                await self._call(parent, lambda md: self._kv.Put(put, timeout=self._timeout, metadata=md))

        # one put per step, all in flight together: etcd commits concurrent proposals in batches
        for start in range(0, need, 4 * _COUNTER_PUTS_IN_FLIGHT):
            await asyncio.gather(*(one() for _ in range(min(4 * _COUNTER_PUTS_IN_FLIGHT, need - start))))
        return need

    async def compact_history(self) -> None:
        """Compact etcd's history up to now (it is global: every key's old revisions go), and
        wait until it is done: a compaction left running in the background stalls the server
        for the next job (a verification opening its connections timed out behind one)."""
        resp = await self._range(None, rpc.RangeRequest(key=self._key(paths.SEPARATOR), count_only=True))
        request = rpc.CompactionRequest(revision=resp.header.revision, physical=True)
        timeout = max(self._timeout, 120.0)
        try:
            await self._call(None, lambda md: self._kv.Compact(request, timeout=timeout, metadata=md))
        except MetadataStoreError as e:
            if "compacted" not in str(e):  # already compacted at or past that revision: fine
                raise

    # -- helpers of the bulk operations --

    def _pack(self, sized: list[tuple[int, int]]) -> list[list[int]]:
        """Cut (index, bytes) into txns within the current op and byte budgets."""
        chunks: list[list[int]] = [[]]
        size = 0
        for i, n in sized:
            n += _OP_OVERHEAD
            if chunks[-1] and (len(chunks[-1]) >= self._txn_ops or size + n > self._txn_bytes):
                chunks.append([])
                size = 0
            chunks[-1].append(i)
            size += n
        return [c for c in chunks if c]

    async def _txn(self, request: Any) -> Any:
        """One txn; ``_TxnTooBig`` (after shrinking the budgets) when the server refuses its size."""
        try:
            return await self._call(None, lambda md: self._kv.Txn(request, timeout=self._timeout, metadata=md))
        except MetadataStoreError as e:
            text = str(e)
            if "too many operations" in text:
                self._txn_ops = max(1, min(self._txn_ops, len(request.success)) // 2)
                raise _TxnTooBig from None
            if "too large" in text or "RESOURCE_EXHAUSTED" in text:
                self._txn_bytes = max(1024, min(self._txn_bytes, request.ByteSize()) // 2)
                raise _TxnTooBig from None
            raise

    async def _blind_puts(
        self, wanted: list[tuple[bytes, bytes, int, int]], failed: dict[int, MetadataStoreError]
    ) -> None:
        """``count`` blind puts of ``value`` on each ``key``, in txns of distinct keys, many in
        flight. ``wanted``: (key, value, count, tag); a failure is recorded in ``failed[tag]``."""
        if not wanted:
            return
        total = sum(n for _, _, n, _ in wanted)
        longest = max(n for _, _, n, _ in wanted)
        per_op = max(len(k) + len(v) + _OP_OVERHEAD for k, v, _, _ in wanted)
        per_txn = max(1, min(self._txn_ops, self._txn_bytes // per_op))
        n_txns = max(longest, -(-total // per_txn))
        txns: list[list[tuple[bytes, bytes, int, Any]]] = [[] for _ in range(n_txns)]
        slot = 0
        for key, value, count, tag in sorted(wanted, key=lambda w: -w[2]):
            op = rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))  # one message, reused
            for k in range(count):  # count <= n_txns: the txns it lands in are distinct
                txns[(slot + k) % n_txns].append((key, value, tag, op))
            slot += count
        sem = asyncio.Semaphore(_BULK_TXNS_IN_FLIGHT)

        async def send(ops: list[tuple[bytes, bytes, int, Any]]) -> None:
            if not ops or all(op[2] in failed for op in ops):
                return
            async with sem:
                request = rpc.TxnRequest(success=[op[3] for op in ops], failure=[])
                try:
                    await self._txn(request)
                    return
                except _TxnTooBig:
                    if len(ops) == 1:
                        key, value, tag, _ = ops[0]
                        failed[tag] = ValueTooLarge(self._path_of(key) or "?", len(value), self._txn_bytes)
                        return
                except MetadataStoreError as e:  # unavailable, full, ...: whether applied is unknown
                    for op in ops:
                        failed.setdefault(op[2], e)
                    return
            half = len(ops) // 2
            await asyncio.gather(send(ops[:half]), send(ops[half:]))

        await asyncio.gather(*(send(t) for t in txns))


class _TxnTooBig(Exception):
    """The server refused a txn for its number of operations or its size."""


#: Keys per page of ``walk`` (values included). etcd 3.4 walks the whole rest of the range for every
#: limited page, so few large pages beat many small ones (200k keys: 1.3 s at 10k, 3.4 s at 1k).
WALK_PAGE_KEYS = 10_000
#: Txns a bulk write keeps in flight.
_BULK_TXNS_IN_FLIGHT = 32
#: Puts ``advance_sequence_counter`` keeps in flight (one key: one put per txn).
_COUNTER_PUTS_IN_FLIGHT = 256
