"""``AgentClient``, a ``MetadataStore`` over the agent's gRPC API (its session and calls streams), and
``connect``, which opens one (the package's doc says how it behaves)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Generator
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from metashift.client.calls import CallsEnded, CallStream
from metashift.client.session import SessionStream
from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc
from metashift.stores import (
    DeleteOp,
    ExistsOp,
    GetChildrenOp,
    GetOp,
    MetadataStore,
    Op,
    OpResult,
    PutOp,
    SessionEvent,
    Stat,
    StoreURL,
)
from metashift.stores.aio import cancel_and_wait
from metashift.stores.coalescing import Coalescer
from metashift.stores.errors import MetadataStoreError, StoreUnavailable
from metashift.stores.ops import GetResult

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
DEFAULT_SESSION_TIMEOUT = 10.0

_call_timeout: contextvars.ContextVar[float | None] = contextvars.ContextVar("metashift_call_timeout", default=None)


def _channel_target(target: str) -> str:
    if target.startswith("unix://") and not target.startswith("unix:///"):
        return "unix:" + target[len("unix://") :]
    if target.startswith("tcp://"):
        return target[len("tcp://") :]
    return target


class AgentClient(MetadataStore):
    """A ``MetadataStore`` served by a metashift agent; make one with ``connect``."""

    def __init__(
        self,
        target: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        name: str = "",
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        token: str | None = None,
        streamed_calls: bool = True,
    ) -> None:
        super().__init__(StoreURL("agent", (), "/"))
        self.target = target
        # presented on every call when the agent requires a bearer token (auth.token_file)
        self._auth: tuple[tuple[str, str], ...] = wire.bearer(token) if token else ()
        self.timeout = timeout
        self.session_timeout = session_timeout
        self.name = name
        self.max_value_size = 0
        self.session_id = ""
        self.node_id = ""
        options = wire.CHANNEL_OPTIONS
        channel_target = _channel_target(target)
        if ca is not None or cert is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=Path(ca).read_bytes() if ca else None,
                private_key=Path(key).read_bytes() if key else None,
                certificate_chain=Path(cert).read_bytes() if cert else None,
            )
            self._channel = grpc.aio.secure_channel(channel_target, credentials, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(channel_target, options=options)
        stub = pb_grpc.MetadataStoreStub(self._channel)
        #: the unary calls, by their field in ``CallRequest``
        self._unary_rpcs = {"get": stub.Get, "get_children": stub.GetChildren, "exists": stub.Exists,
                            "put": stub.Put, "delete": stub.Delete, "batch": stub.Batch}  # fmt: skip
        self._rpc_watch = stub.Watch
        self._calls = CallStream(lambda metadata: stub.Calls(metadata=metadata)) if streamed_calls else None
        """Calls made one after another go on one Calls stream (``calls``), not a gRPC call each."""
        open_session = pb_grpc.SessionStub(self._channel).Open
        self._session = SessionStream(
            lambda wait_for_ready: open_session(wait_for_ready=wait_for_ready, metadata=self._auth),
            target=target, name=name, timeout=session_timeout, on_started=self._started, on_event=self._session_event,
        )
        self._metadata: tuple[tuple[str, str], ...] = self._auth
        self._watch_task: asyncio.Task[None] | None = None
        self._watch_ready: asyncio.Future[None] | None = None
        self._closing = False
        self.coalescer = Coalescer(self._unary, self._batch)
        """Sends calls made side by side as one Batch call (its figures: ``batches_sent``, ``ops_in_batches``)."""

    # ---- opening and closing --------------------------------------------------------------------

    async def _open(self) -> AgentClient:
        try:
            await asyncio.wait_for(self._session.open(), self.timeout)
        except TimeoutError:
            await self._channel.close()
            raise StoreUnavailable(f"no answer from the metashift agent at {self.target}") from None
        except grpc.aio.AioRpcError as err:
            await self._channel.close()
            raise self._error(err, None) from None
        except BaseException:
            await self._channel.close()
            raise
        return self

    def _started(self, started: pb.SessionStarted) -> None:
        """A session started (at open, or after a re-attach): its figures, and its id on every call."""
        self.session_id = started.session_id
        self.node_id = started.node_id
        self.max_value_size = started.max_value_size
        self.session_timeout = started.timeout_ms / 1000
        self._metadata = (*self._auth, (wire.SESSION_KEY, started.session_id))

    async def close(self) -> None:
        """End the session (the agent deletes its ephemerals before this returns) and the channel."""
        if self._closing:
            return
        self._closing = True
        await self._session.close(self.timeout)
        await cancel_and_wait((self._watch_task,), f"client of {self.target}")
        if self._calls is not None:
            await self._calls.close()
        await self._channel.close()

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ---- notifications --------------------------------------------------------------------------

    def _watch_scope_changed(self, added: frozenset[str], removed: frozenset[str]) -> None:
        """The first listener opens the agent's Watch stream (of the whole tree, kept open), and the
        next call waits until the agent has registered it, so no change is missed."""
        if added and self._watch_task is None and not self._closing:
            self._watch_ready = asyncio.get_running_loop().create_future()
            self._watch_task = asyncio.create_task(self._watch_loop())

    async def watch_ready(self) -> None:
        if self._watch_ready is not None:
            await asyncio.shield(self._watch_ready)

    async def _watch_loop(self) -> None:
        delay = 0.05
        missed = False
        while not self._closing:
            call = self._rpc_watch(pb.WatchRequest(path_prefix="/"), wait_for_ready=True, metadata=self._auth)
            try:
                async for response in call:
                    if response.WhichOneof("kind") == "ready":
                        delay = 0.05
                        if self._watch_ready is not None and not self._watch_ready.done():
                            self._watch_ready.set_result(None)
                        if missed:  # watching again: listeners re-read what they cache
                            missed = False
                            self._session_event(SessionEvent.RECONNECTED)
                        continue
                    notification = wire.notification_from_pb(response.notification)
                    if notification is not None:
                        self._notify(notification)
            except grpc.aio.AioRpcError as err:
                log.debug("watch stream ended: %s", err)
                if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and not missed:
                    # we read too slowly and the agent dropped notifications for us: say so the
                    # way a store says it after a lost connection
                    missed = True
                    self._session_event(SessionEvent.CONNECTION_LOST)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _ready(self, within: float) -> None:
        ready = self._watch_ready
        if ready is not None and not ready.done():
            try:
                await asyncio.wait_for(asyncio.shield(ready), within)
            except TimeoutError:
                raise StoreUnavailable(f"the metashift agent at {self.target} did not open the watch") from None

    # ---- calls ----------------------------------------------------------------------------------

    def _timeout(self) -> float:
        t = _call_timeout.get()
        return self.timeout if t is None else t

    def _error(self, err: grpc.aio.AioRpcError, path: str | None, *, write: bool = False) -> MetadataStoreError:
        for key, value in err.trailing_metadata() or ():
            if key == wire.ERROR_DETAIL_KEY:
                try:
                    return wire.error_from_pb(pb.Error.FromString(value))
                except Exception:
                    break
        code = err.code()
        message = f"metashift agent at {self.target}: {code.name}: {err.details()}"
        return wire.error_from_status(code, message, path, write=write)

    async def _call(self, kind: str, request: Any, path: str | None, *, write: bool = False) -> Any:
        """One call (``kind``: its field in ``CallRequest``): on the Calls stream, else unary."""
        # one deadline for the whole call: waiting for the watch uses up part of it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout()
        if self._watch_ready is not None:
            await self._ready(self._timeout())
        calls = self._calls
        if calls is not None and calls.supported:
            try:
                answer = await calls.call(kind, request, max(0.0, deadline - loop.time()), self._metadata)
            except grpc.aio.AioRpcError as err:
                if calls.supported:
                    raise self._error(err, path, write=write) from None
                # an agent without the Calls stream: it ran nothing, the call goes as a unary call
            except CallsEnded as err:
                message = f"metashift agent at {self.target}: UNAVAILABLE: {err}"
                raise wire.error_from_status(grpc.StatusCode.UNAVAILABLE, message, path, write=write) from None
            except TimeoutError:
                message = f"metashift agent at {self.target}: DEADLINE_EXCEEDED: no answer within the call's deadline"
                raise wire.error_from_status(grpc.StatusCode.DEADLINE_EXCEEDED, message, path, write=write) from None
            else:
                if answer.WhichOneof("result") == "error":
                    raise wire.error_from_pb(answer.error)
                return getattr(answer, kind)
        try:
            rpc = self._unary_rpcs[kind]
            return await rpc(request, timeout=max(0.0, deadline - loop.time()), metadata=self._metadata)
        except grpc.aio.AioRpcError as err:
            raise self._error(err, path, write=write) from None

    # Calls without a deadline of their own (and not ephemeral puts, whose session check may fail
    # a batch as a whole) made side by side go together as one Batch call (``Coalescer``).

    def _coalesced(self, op: Op) -> bool:
        return _call_timeout.get() is None and not (isinstance(op, PutOp) and op.ephemeral)

    async def _via(self, op: Op) -> Any:
        # a path over the agent's limit is refused here, alone and unsent (not failing a batch)
        wire.check_path(op.path, isinstance(op, PutOp) and op.sequential)
        return await (self.coalescer.run(op) if self._coalesced(op) else self._unary(op))

    async def _get(self, path: str) -> GetResult:
        return await self._via(GetOp(path))

    async def _get_children(self, path: str) -> list[str]:
        return await self._via(GetChildrenOp(path))

    async def _exists(self, path: str) -> bool:
        return await self._via(ExistsOp(path))

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        return await self._via(PutOp(path, value, expected_version, ephemeral, sequential))

    async def _delete(self, path: str, expected_version: int | None) -> None:
        await self._via(DeleteOp(path, expected_version))

    async def _unary(self, op: Op) -> OpResult:
        """``op`` as its own call."""
        path = op.path
        if isinstance(op, GetOp):
            r = await self._call("get", pb.GetRequest(path=path), path)
            return (r.value, wire.stat_from_pb(r.stat)) if r.found else None
        if isinstance(op, GetChildrenOp):
            r = await self._call("get_children", pb.GetChildrenRequest(path=path), path)
            return list(r.children)
        if isinstance(op, ExistsOp):
            r = await self._call("exists", pb.ExistsRequest(path=path), path)
            return bool(r.exists)
        if isinstance(op, PutOp):
            r = await self._call("put", wire.put_to_pb(op), path, write=True)
            return wire.stat_from_pb(r.stat)
        await self._call("delete", wire.delete_to_pb(op), path, write=True)
        return None

    async def _batch(self, ops: list[Op]) -> list[OpResult]:
        for op in ops:
            wire.check_path(op.path, isinstance(op, PutOp) and op.sequential)
        request = pb.BatchRequest(ops=[wire.op_to_pb(op) for op in ops])
        r = await self._call("batch", request, None, write=any(wire.is_write(op) for op in ops))
        return [wire.result_from_pb(op, result) for op, result in zip(ops, r.results, strict=True)]

    # ---- the store interface, plus a per-call deadline ------------------------------------------

    async def get(self, path: str, *, timeout: float | None = None) -> GetResult:  # noqa: ASYNC109
        with _deadline(timeout):
            return await super().get(path)

    async def get_children(self, path: str, *, timeout: float | None = None) -> list[str]:  # noqa: ASYNC109
        with _deadline(timeout):
            return await super().get_children(path)

    async def exists(self, path: str, *, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        with _deadline(timeout):
            return await super().exists(path)

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Stat:
        with _deadline(timeout):
            return await super().put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)

    async def delete(self, path: str, expected_version: int | None = None, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        with _deadline(timeout):
            await super().delete(path, expected_version)

    async def batch(self, ops: Any, *, timeout: float | None = None) -> list[OpResult]:  # noqa: ASYNC109
        with _deadline(timeout):
            return await super().batch(ops)


class _deadline:
    """Set the deadline of the calls made inside (``None``: the client's default)."""

    __slots__ = ("_timeout", "_token")

    def __init__(self, timeout: float | None) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        self._timeout = timeout
        self._token: contextvars.Token[float | None] | None = None

    def __enter__(self) -> None:
        if self._timeout is not None:
            self._token = _call_timeout.set(self._timeout)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _call_timeout.reset(self._token)


class connect:
    """Open a session with the metashift agent at ``target`` (``unix:/path/to.sock``, or
    ``host:port`` / ``tcp://host:port``); use as ``async with connect(...) as client`` or
    ``client = await connect(...)``.

    ``options`` are ``AgentClient``'s: ``timeout`` (default deadline of each call, seconds),
    ``session_timeout`` (how long the agent keeps the session without keep-alives; the client
    sends them every third of it), ``name``, ``ca`` and, for mutual TLS, ``cert`` and ``key``
    (TLS files), ``token`` (when the agent requires a bearer token). Raises ``StoreUnavailable``
    when no agent answers, ``AuthFailed`` when it refuses us.
    """

    def __init__(self, target: str, **options: Any) -> None:
        self._kwargs = options
        self._target = target
        self._client: AgentClient | None = None

    async def _open(self) -> AgentClient:
        return await AgentClient(self._target, **self._kwargs)._open()

    def __await__(self) -> Generator[Any, None, AgentClient]:
        return self._open().__await__()

    async def __aenter__(self) -> AgentClient:
        self._client = await self._open()
        return self._client

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._client is not None:
            await self._client.close()
