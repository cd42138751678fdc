"""The gRPC gateway: ``metashift.v1.MetadataStore`` and ``metashift.v1.Session`` over grpc.aio.

Every request is checked here, server-side, whatever the client: a malformed request gets
INVALID_ARGUMENT and nothing is written. Reads go to the router's active store; writes pass the
write gate first. Failures end with a status code and the ``metashift.v1.Error`` detail in the
trailing metadata (see ``wire``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from metashift.agent.gate import WriteGate
from metashift.agent.metrics import AgentMetrics
from metashift.agent.router import Router
from metashift.agent.sequence_floors import SequenceFloors
from metashift.agent.sessions import ClientSession, SessionRegistry
from metashift.proto import wire
from metashift.proto.errors import HeldForMigration, Internal, InvalidArgument, NoSession, WriteOutcomeUnknown
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores import (
    DeleteOp,
    MetadataStore,
    Notification,
    Op,
    OpResult,
    PutOp,
    Stat,
    paths,
)
from metashift.stores.errors import InvalidPath, MetadataStoreError, StoreFull, StoreUnavailable, ValueTooLarge

log = logging.getLogger(__name__)

STORE_SERVICE = "metashift.v1.MetadataStore"
SESSION_SERVICE = "metashift.v1.Session"
WATCH_QUEUE_LIMIT = 100_000
#: Queued for a Watch stream whose reader fell WATCH_QUEUE_LIMIT notifications behind.
WATCH_OVERFLOW = "overflow"
#: What a Watch stream's queue carries: a notification, None (the agent closes), or WATCH_OVERFLOW.
WatchItem = Notification | None | str
HELLO_TIMEOUT = 10.0
#: Methods that never write: whatever fails, nothing was written.
READ_METHODS = frozenset({"Get", "GetChildren", "Exists", "Watch"})
MAX_BATCH_OPS = 10_000


class _Malformed:
    """What a request that does not decode becomes; the handler answers INVALID_ARGUMENT."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _decoder(message: Any) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except Exception as exc:  # google.protobuf.message.DecodeError and kin
            return _Malformed(f"cannot decode {message.DESCRIPTOR.full_name}: {exc}")

    return decode


class NotificationHub:
    """Fans the active store's notifications out to the Watch streams: each stream listens to the
    active store on its own prefix, so a store with no stream open watches nothing for them."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._queues: dict[asyncio.Queue[WatchItem], tuple[str, Callable[[], None]]] = {}
        router.on_switch(self._switched)

    def _switched(self, old: MetadataStore, new: MetadataStore) -> None:
        for queue, (prefix, remove) in list(self._queues.items()):
            remove()
            self._queues[queue] = (prefix, self._listen(new, queue, prefix))

    def _listen(self, store: MetadataStore, queue: asyncio.Queue[WatchItem], prefix: str) -> Callable[[], None]:
        def publish(notification: Notification) -> None:
            if queue.qsize() >= WATCH_QUEUE_LIMIT:
                # too slow a reader: end its stream with an error (it has missed notifications
                # and must re-read what it caches) rather than let the queue grow forever
                self.unsubscribe(queue)
                queue.put_nowait(WATCH_OVERFLOW)
                return
            queue.put_nowait(notification)

        return store.add_listener(publish, under=prefix)

    def subscribe(self, prefix: str) -> asyncio.Queue[WatchItem]:
        queue: asyncio.Queue[WatchItem] = asyncio.Queue()
        self._queues[queue] = (prefix, self._listen(self._router.active, queue, prefix))
        return queue

    async def ready(self) -> None:
        """The active store watches every stream's prefix (its server confirmed it)."""
        await self._router.active.watch_ready()

    def unsubscribe(self, queue: asyncio.Queue[WatchItem]) -> None:
        entry = self._queues.pop(queue, None)
        if entry is not None:
            entry[1]()

    def close(self) -> None:
        for queue in list(self._queues):
            self.unsubscribe(queue)
            queue.put_nowait(None)

    def __len__(self) -> int:
        return len(self._queues)


class Gateway:
    """The servicers. ``handlers()`` gives what to register on a ``grpc.aio`` server."""

    def __init__(
        self,
        router: Router,
        gate: WriteGate,
        registry: SessionRegistry,
        metrics: AgentMetrics,
        *,
        node_id: str = "",
        role: str = "broker",
        session_timeout: float = 10.0,
        session_max_timeout: float = 60.0,
    ) -> None:
        self.router = router
        self.gate = gate
        self.registry = registry
        self.metrics = metrics
        self.hub = NotificationHub(router)
        self.floors = SequenceFloors(router)
        self.node_id = node_id
        self.role = role
        self.session_timeout = session_timeout
        self.session_max_timeout = session_max_timeout
        self._streams: set[asyncio.Queue[tuple[Any, ...]]] = set()
        self._store_events_remove = router.active.add_session_listener(self.registry.store_event)
        router.on_switch(self._switched)
        self._closing = False

    def _switched(self, old: MetadataStore, new: MetadataStore) -> None:
        self._store_events_remove()
        self._store_events_remove = new.add_session_listener(self.registry.store_event)
        self.metrics.active_store.state(self.router.active_name)

    # ---- registration ---------------------------------------------------------------------------

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        def unary(name: str, fn: Callable[[Any, Any], Awaitable[Any]], req: Any, resp: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                self._instrument(name, fn), request_deserializer=_decoder(req),
                response_serializer=resp.SerializeToString,
            )

        store = {
            "Get": unary("Get", self._get, pb.GetRequest, pb.GetResponse),
            "GetChildren": unary("GetChildren", self._get_children, pb.GetChildrenRequest, pb.GetChildrenResponse),
            "Exists": unary("Exists", self._exists, pb.ExistsRequest, pb.ExistsResponse),
            "Put": unary("Put", self._put, pb.PutRequest, pb.PutResponse),
            "Delete": unary("Delete", self._delete, pb.DeleteRequest, pb.DeleteResponse),
            "Batch": unary("Batch", self._batch, pb.BatchRequest, pb.BatchResponse),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self._counted_stream("Watch", self._watch), request_deserializer=_decoder(pb.WatchRequest),
                response_serializer=pb.WatchResponse.SerializeToString,
            ),
        }
        session = {
            "Open": grpc.stream_stream_rpc_method_handler(
                self._counted_stream("Session", self._session), request_deserializer=_decoder(pb.SessionRequest),
                response_serializer=pb.SessionResponse.SerializeToString,
            ),
        }
        return [
            grpc.method_handlers_generic_handler(STORE_SERVICE, store),
            grpc.method_handlers_generic_handler(SESSION_SERVICE, session),
        ]

    def _instrument(
        self, method: str, fn: Callable[[Any, Any], Awaitable[Any]]
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
        requests = self.metrics.requests
        ok_counter = requests.labels(method, "OK")
        latency = self.metrics.latency.labels(method)

        async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
            start = time.perf_counter()
            try:
                if isinstance(request, _Malformed):
                    raise InvalidArgument(request.reason)
                response = await fn(request, context)
            except MetadataStoreError as err:
                error = err
            except (TypeError, ValueError) as err:  # argument checks of the store layer
                error = InvalidArgument(str(err))
            except grpc.aio.AbortError:  # the handler ended the call itself
                raise
            except Exception as err:  # a bug: say so (INTERNAL, counted, logged), not gRPC's bare UNKNOWN
                error = _unexpected(method, err)
            else:
                latency.observe(time.perf_counter() - start)
                ok_counter.inc()
                return response
            detail, code = wire.error_to_pb(error, read=method in READ_METHODS)
            latency.observe(time.perf_counter() - start)
            requests.labels(method, code.name).inc()
            await self._abort(context, error, (detail, code))

        return handler

    async def _write(self, apply: Callable[[MetadataStore], Awaitable[Any]], context: grpc.aio.ServicerContext) -> Any:
        """Run ``apply`` through the write gate. Once the gate has handed a write to the store, a
        store that stops answering leaves its outcome unknown: say so (WriteOutcomeUnknown), never
        a retry-safe StoreUnavailable."""
        try:
            return await self.gate.run(apply, self._hold_budget(context))
        except (HeldForMigration, StoreFull):
            raise
        except StoreUnavailable as err:
            raise _outcome_unknown(err) from err

    def _counted_stream(
        self, method: str, fn: Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]:
        """Count a streaming call by the status it ended with, once it ends (its duration is the
        stream's life, so no latency is observed)."""
        requests = self.metrics.requests

        async def handler(request: Any, context: grpc.aio.ServicerContext) -> None:
            status = "OK"
            try:
                await fn(request, context)
            except grpc.aio.AbortError:
                code = context.code()
                status = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
                raise
            except asyncio.CancelledError:
                status = "CANCELLED"
                raise
            except Exception as err:
                status = "INTERNAL"
                await self._abort(context, _unexpected(method, err))
            finally:
                requests.labels(method, status).inc()

        return handler

    # ---- helpers --------------------------------------------------------------------------------

    def _session_of(self, context: grpc.aio.ServicerContext) -> ClientSession | None:
        for key, value in context.invocation_metadata() or ():
            if key == wire.SESSION_KEY:
                return self.registry.get(value if isinstance(value, str) else value.decode())
        return None

    @staticmethod
    def _hold_budget(context: grpc.aio.ServicerContext) -> float | None:
        """How long a held write may wait: the caller's deadline, less a margin so that our
        HeldForMigration answer reaches the caller before its own deadline fires."""
        remaining = context.time_remaining()
        if remaining is None:
            return None
        # generous: on a loaded host a margin of a few ms loses the race to the caller's own timer,
        # and the caller then sees DEADLINE_EXCEEDED instead of the reason
        return max(0.0, remaining - min(0.5, remaining * 0.2))

    def _stat(self, stat: Stat, session: ClientSession | None) -> pb.Stat:
        return wire.stat_to_pb(stat, stat.ephemeral and stat.created_by_self and self.registry.owns(session, stat.path))

    @staticmethod
    def _path(path: str) -> str:
        return wire.check_path(path)

    @staticmethod
    def _check_put(op: PutOp, store: MetadataStore) -> PutOp:
        path = wire.check_path(op.path, op.sequential)
        if path == paths.SEPARATOR and not op.sequential:
            raise InvalidPath(path, "the root cannot be written")
        if len(op.value) > store.max_value_size:
            raise ValueTooLarge(path, len(op.value), store.max_value_size)
        if op.expected_version is not None and op.expected_version < -1:
            raise InvalidArgument(f"expected_version {op.expected_version} is not valid", path)
        return op

    @staticmethod
    def _check_delete(op: DeleteOp) -> DeleteOp:
        path = wire.check_path(op.path)
        if path == paths.SEPARATOR:
            raise InvalidPath(path, "the root cannot be deleted")
        if op.expected_version is not None and op.expected_version < 0:
            raise InvalidArgument(f"expected_version {op.expected_version} is not valid", path)
        return op

    def _check_op(self, op: Op) -> Op:
        if isinstance(op, PutOp):
            return self._check_put(op, self.router.active)
        if isinstance(op, DeleteOp):
            return self._check_delete(op)
        wire.check_path(op.path)
        return op

    def _require_session(self, context: grpc.aio.ServicerContext, path: str) -> ClientSession:
        session = self._session_of(context)
        if session is None:
            raise NoSession(f"an ephemeral put needs a live session ({wire.SESSION_KEY} metadata)", path)
        return session

    async def _after_put(self, session: ClientSession | None, op: PutOp, stat: Stat, store: MetadataStore) -> None:
        self.registry.record_put(session, op.value, op.ephemeral, stat)
        if op.ephemeral and session is not None and session.ended and stat.ephemeral:
            # the session ended while this put was in flight: its ephemeral must not outlive it
            self.registry.record_delete(stat.path)
            try:
                await store.delete(stat.path, expected_version=stat.version)
            except MetadataStoreError:
                pass
            err = NoSession("the session ended while the put was in flight (it was written, then deleted)",
                            stat.path)
            err.write_may_have_happened = True
            raise err

    # ---- MetadataStore --------------------------------------------------------------------------

    async def _read_store(self, context: grpc.aio.ServicerContext) -> MetadataStore:
        """The store a read goes to, once reads may be answered (held in the freeze, like writes)."""
        return await self.gate.readable(self._hold_budget(context))

    async def _get(self, req: pb.GetRequest, context: grpc.aio.ServicerContext) -> pb.GetResponse:
        path = self._path(req.path)
        got = await (await self._read_store(context)).get(path)
        if got is None:
            return pb.GetResponse(found=False)
        value, stat = got
        session = self._session_of(context) if stat.ephemeral else None
        return pb.GetResponse(found=True, value=value, stat=self._stat(stat, session))

    async def _get_children(self, req: pb.GetChildrenRequest, context: grpc.aio.ServicerContext) -> Any:
        path = self._path(req.path)
        return pb.GetChildrenResponse(children=await (await self._read_store(context)).get_children(path))

    async def _exists(self, req: pb.ExistsRequest, context: grpc.aio.ServicerContext) -> pb.ExistsResponse:
        path = self._path(req.path)
        return pb.ExistsResponse(exists=await (await self._read_store(context)).exists(path))

    async def _put(self, req: pb.PutRequest, context: grpc.aio.ServicerContext) -> pb.PutResponse:
        op = self._check_put(wire.put_from_pb(req), self.router.active)
        session = self._require_session(context, op.path) if op.ephemeral else self._session_of(context)

        async def apply(store: MetadataStore) -> Stat:
            named = await self.floors.named(store, op)  # under a counter a migration retired
            stat = await store.put(named.path, named.value, named.expected_version, ephemeral=named.ephemeral,
                                   sequential=named.sequential)
            await self._after_put(session, named, stat, store)
            return stat

        stat = await self._write(apply, context)
        return pb.PutResponse(stat=self._stat(stat, session))

    async def _delete(self, req: pb.DeleteRequest, context: grpc.aio.ServicerContext) -> pb.DeleteResponse:
        op = self._check_delete(wire.delete_from_pb(req))

        async def apply(store: MetadataStore) -> None:
            await store.delete(op.path, op.expected_version)
            self.registry.record_delete(op.path)

        await self._write(apply, context)
        return pb.DeleteResponse()

    async def _batch(self, req: pb.BatchRequest, context: grpc.aio.ServicerContext) -> pb.BatchResponse:
        if len(req.ops) > MAX_BATCH_OPS:
            raise InvalidArgument(f"a batch holds at most {MAX_BATCH_OPS} operations, not {len(req.ops)}")
        session: ClientSession | None = self._session_of(context)
        ops = [self._check_op(wire.op_from_pb(op, i)) for i, op in enumerate(req.ops)]
        for op in ops:
            if isinstance(op, PutOp) and op.ephemeral and session is None:
                self._require_session(context, op.path)
        if any(isinstance(op, PutOp | DeleteOp) for op in ops):

            async def apply(store: MetadataStore) -> list[OpResult]:
                # sequential puts under a counter a migration retired: named after its floor
                ops[:] = [await self.floors.named(store, op) if isinstance(op, PutOp) else op for op in ops]
                results = await store.batch(ops)
                ended: NoSession | None = None
                for i, (op, result) in enumerate(zip(ops, results, strict=True)):
                    if wire.is_write(op) and isinstance(result, StoreUnavailable) and not isinstance(result, StoreFull):
                        results[i] = _outcome_unknown(result)
                    elif isinstance(op, PutOp) and isinstance(result, Stat):
                        try:
                            await self._after_put(session, op, result, store)
                        except NoSession as err:  # go on: every ephemeral of the ended session goes
                            ended = ended or err
                    elif isinstance(op, DeleteOp) and result is None:
                        self.registry.record_delete(op.path)
                if ended is not None:
                    raise ended
                return results

            results = await self._write(apply, context)
        else:
            try:
                results = await (await self._read_store(context)).batch(ops)
            except MetadataStoreError as err:
                err.write_may_have_happened = False  # reads only
                raise

        def stat_to(stat: Stat) -> pb.Stat:
            return self._stat(stat, session)

        return pb.BatchResponse(
            results=[wire.result_to_pb(op, r, stat_to) for op, r in zip(ops, results, strict=True)]
        )

    async def _watch(self, req: Any, context: grpc.aio.ServicerContext) -> None:
        if isinstance(req, _Malformed):
            await self._abort(context, InvalidArgument(req.reason))
            return
        prefix = req.path_prefix or paths.SEPARATOR
        try:
            wire.check_path(prefix)
        except InvalidPath as err:
            await self._abort(context, err)
            return
        queue = self.hub.subscribe(prefix)
        self.metrics.watchers.set(len(self.hub))
        try:
            await self.hub.ready()  # ready means: every change from now on is sent
            await context.write(pb.WatchResponse(ready=True))
            while True:
                notification = await queue.get()
                if notification is None:
                    return
                if isinstance(notification, str):  # WATCH_OVERFLOW
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"this watch fell {WATCH_QUEUE_LIMIT} notifications behind and was ended: "
                        "notifications were lost, re-read what you cache",
                    )
                    return
                await context.write(
                    pb.WatchResponse(
                        notification=pb.Notification(
                            type=wire.NOTIFICATION_TO_PB[notification.type], path=notification.path
                        )
                    )
                )
        finally:
            self.hub.unsubscribe(queue)
            self.metrics.watchers.set(len(self.hub))

    async def _abort(
        self,
        context: grpc.aio.ServicerContext,
        error: MetadataStoreError,
        encoded: tuple[pb.Error, grpc.StatusCode] | None = None,
    ) -> None:
        """End the call with ``error``'s status code and its machine-readable details
        (``encoded``: ``wire.error_to_pb(error)`` when the caller has it already)."""
        detail, code = encoded or wire.error_to_pb(error)
        await context.abort(code, wire.status_message(detail), trailing_metadata=wire.trailers(detail))

    # ---- Session --------------------------------------------------------------------------------

    async def _session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        try:
            first = await asyncio.wait_for(context.read(), HELLO_TIMEOUT)
        except TimeoutError:
            await self._abort(context, InvalidArgument("no Hello within 10 seconds"))
            return
        if first is grpc.aio.EOF:
            return
        if isinstance(first, _Malformed) or first.WhichOneof("kind") != "hello":
            await self._abort(context, InvalidArgument("a session starts with Hello"))
            return
        if self._closing:
            await self._abort(context, StoreUnavailable("the agent is shutting down"))
            return
        hello = first.hello
        timeout = hello.timeout_ms / 1000 if hello.timeout_ms else self.session_timeout
        timeout = min(max(timeout, 0.5), self.session_max_timeout)
        out: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        session = self.registry.open(hello.client_name[:200], timeout, lambda ev: out.put_nowait(("event", ev)))
        self.metrics.sessions.set(len(self.registry))
        self._streams.add(out)
        reader = asyncio.create_task(self._session_reader(context, session, out))
        reason = "stream broken"
        try:
            await context.write(
                pb.SessionResponse(
                    started=pb.SessionStarted(
                        session_id=session.id,
                        timeout_ms=int(timeout * 1000),
                        max_value_size=self.router.active.max_value_size,
                        node_id=self.node_id,
                        role=self.role,
                    )
                )
            )
            while True:
                try:
                    item = await asyncio.wait_for(out.get(), max(session.expires_in(), 0.01))
                except TimeoutError:
                    if session.expires_in() > 0:
                        continue
                    reason = "keep-alive timed out"
                    await self._end(session, reason)
                    await context.write(pb.SessionResponse(event=pb.SessionEvent(type=pb.SESSION_LOST)))
                    return
                kind = item[0]
                if kind == "keepalive":
                    await context.write(pb.SessionResponse(keep_alive=pb.KeepAlive(seq=item[1])))
                elif kind == "event":
                    event = pb.SessionEvent(type=wire.SESSION_EVENT_TO_PB[item[1]])
                    await context.write(pb.SessionResponse(event=event))
                elif kind == "close":
                    reason = "closed by the client"
                    await self._end(session, reason)
                    await context.write(pb.SessionResponse(closed=pb.SessionClosed()))
                    return
                elif kind == "eof":
                    reason = "stream closed"
                    return
                elif kind == "shutdown":
                    reason = "agent shutting down"
                    return
                elif kind == "bad":
                    reason = "malformed request"
                    await self._end(session, reason)
                    await self._abort(context, InvalidArgument(item[1]))
                    return
        finally:
            reader.cancel()
            self._streams.discard(out)
            if not session.ended:
                self.registry.end_soon(session, reason)
            self.metrics.sessions.set(len(self.registry))

    async def _end(self, session: ClientSession, reason: str) -> None:
        """End ``session`` in a task of its own: a client that goes away meanwhile (its stream
        cancelled) must not cut the deletion of its ephemerals short."""
        await asyncio.shield(self.registry.end_soon(session, reason))

    async def _session_reader(
        self, context: grpc.aio.ServicerContext, session: ClientSession, out: asyncio.Queue[tuple[Any, ...]]
    ) -> None:
        try:
            while True:
                msg = await context.read()
                if msg is grpc.aio.EOF:
                    out.put_nowait(("eof",))
                    return
                if isinstance(msg, _Malformed):
                    out.put_nowait(("bad", msg.reason))
                    return
                kind = msg.WhichOneof("kind")
                session.touch()
                if kind == "keep_alive":
                    out.put_nowait(("keepalive", msg.keep_alive.seq))
                elif kind == "close":
                    out.put_nowait(("close",))
                    return
                else:
                    out.put_nowait(("bad", f"unexpected {kind or 'empty'} message in an open session"))
                    return
        except asyncio.CancelledError:
            raise
        except Exception:  # the stream broke under us: the writer side notices too
            out.put_nowait(("eof",))

    # ---- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """End every session stream and watch; fail held writes (the agent is going away)."""
        self._closing = True
        self.gate.shutdown()
        for out in list(self._streams):
            out.put_nowait(("shutdown",))
        self.hub.close()


def _unexpected(method: str, err: Exception) -> MetadataStoreError:
    """Log a handler's unexpected exception with its traceback (call from its ``except``) and
    make it the error the caller gets: INTERNAL with the Internal detail."""
    log.exception("%s failed unexpectedly", method)
    return Internal(f"internal error in the agent ({type(err).__name__}: {err})")


def _outcome_unknown(err: StoreUnavailable) -> WriteOutcomeUnknown:
    """A write the store had and did not answer: ``err`` retold as WriteOutcomeUnknown."""
    reason = wire.strip_path(str(err), err.path)
    return WriteOutcomeUnknown(f"the store did not answer the write, which may or may not be applied ({reason})",
                               err.path)

