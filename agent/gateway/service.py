"""The gRPC gateway: ``metashift.v1.MetadataStore`` and ``metashift.v1.Session`` over grpc.aio.
The streams are served by ``watches`` (Watch), ``calls`` (Calls) and ``sessions``
(Session/Open).

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

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.router import Router
from metashift.agent.core.sequence_floors import SequenceFloors
from metashift.agent.core.sessions import ClientSession, SessionRegistry
from metashift.agent.gateway.calls import Answer, CallStreams
from metashift.agent.gateway.errors import Failure, Malformed, abort, decoder, end_call
from metashift.agent.gateway.sessions import SessionStreams
from metashift.agent.gateway.watches import WatchStreams
from metashift.agent.metrics import AgentMetrics
from metashift.proto import wire
from metashift.proto.errors import HeldForMigration, Internal, InvalidArgument, NoSession, WriteOutcomeUnknown
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores import (
    DeleteOp,
    MetadataStore,
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
#: Methods that never write: whatever fails, nothing was written.
READ_METHODS = frozenset({"Get", "GetChildren", "Exists", "Watch"})
MAX_BATCH_OPS = 10_000


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
        self.watches = WatchStreams(router, metrics)
        self.sessions = SessionStreams(
            router, registry, metrics, node_id=node_id, role=role, session_timeout=session_timeout,
            session_max_timeout=session_max_timeout,
        )  # fmt: skip
        self.floors = SequenceFloors(router)
        self.calls = CallStreams({
            "get": self._answering("Get", self._get),
            "get_children": self._answering("GetChildren", self._get_children),
            "exists": self._answering("Exists", self._exists),
            "put": self._answering("Put", self._put),
            "delete": self._answering("Delete", self._delete),
            "batch": self._answering("Batch", self._batch),
        })  # fmt: skip
        self._store_events_remove = router.active.add_session_listener(self.registry.store_event)
        router.on_switch(self._switched)

    def _switched(self, old: MetadataStore, new: MetadataStore) -> None:
        self._store_events_remove()
        self._store_events_remove = new.add_session_listener(self.registry.store_event)
        self.metrics.active_store.state(self.router.active_name)

    # ---- registration ---------------------------------------------------------------------------

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        def unary(name: str, fn: Callable[[Any, Any], Awaitable[Any]], req: Any, resp: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                self._instrument(name, fn),
                request_deserializer=decoder(req),
                response_serializer=resp.SerializeToString,
            )

        store = {
            "Calls": grpc.stream_stream_rpc_method_handler(
                self._counted_stream("Calls", self.calls.serve),
                request_deserializer=decoder(pb.CallRequest),
                response_serializer=pb.CallResponse.SerializeToString,
            ),
            "Get": unary("Get", self._get, pb.GetRequest, pb.GetResponse),
            "GetChildren": unary("GetChildren", self._get_children, pb.GetChildrenRequest, pb.GetChildrenResponse),
            "Exists": unary("Exists", self._exists, pb.ExistsRequest, pb.ExistsResponse),
            "Put": unary("Put", self._put, pb.PutRequest, pb.PutResponse),
            "Delete": unary("Delete", self._delete, pb.DeleteRequest, pb.DeleteResponse),
            "Batch": unary("Batch", self._batch, pb.BatchRequest, pb.BatchResponse),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self._counted_stream("Watch", self.watches.serve),
                request_deserializer=decoder(pb.WatchRequest),
                response_serializer=pb.WatchResponse.SerializeToString,
            ),
        }
        session = {
            "Open": grpc.stream_stream_rpc_method_handler(
                self._counted_stream("Session", self.sessions.serve),
                request_deserializer=decoder(pb.SessionRequest),
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
        answer = self._answering(method, fn)

        async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
            response = await answer(request, context)
            if isinstance(response, Failure):
                await end_call(context, response.detail, response.code)
            return response

        return handler

    def _answering(self, method: str, fn: Callable[[Any, Any], Awaitable[Any]]) -> Answer:
        """``fn`` run for one call (a unary call, or a call on a Calls stream): its response, or
        the ``Failure`` it ended with; counted and timed either way."""
        requests = self.metrics.requests
        ok_counter = requests.labels(method, "OK")
        latency = self.metrics.latency.labels(method)

        async def answer(request: Any, context: Any) -> Any:
            start = time.perf_counter()
            try:
                if isinstance(request, Malformed):
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
            return Failure(detail, code)

        return answer

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
                if self.gate.shutting_down:
                    # the server's stop cancels a stream still open past the drain: it ends with the
                    # agent (gRPC's core would log the cancellation as an error, with a traceback)
                    return
                raise
            except Exception as err:
                status = "INTERNAL"
                await abort(context, _unexpected(method, err))
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
            err = NoSession("the session ended while the put was in flight (it was written, then deleted)", stat.path)
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
            stat = await store.put(
                named.path, named.value, named.expected_version, ephemeral=named.ephemeral, sequential=named.sequential
            )
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

        return pb.BatchResponse(results=[wire.result_to_pb(op, r, stat_to) for op, r in zip(ops, results, strict=True)])

    # ---- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """End every session stream and watch; fail held writes (the agent is going away)."""
        self.sessions.shutdown()
        self.gate.shutdown()
        self.watches.close()


def _unexpected(method: str, err: Exception) -> MetadataStoreError:
    """Log a handler's unexpected exception with its traceback (call from its ``except``) and
    make it the error the caller gets: INTERNAL with the Internal detail."""
    log.exception("%s failed unexpectedly", method)
    return Internal(f"internal error in the agent ({type(err).__name__}: {err})")


def _outcome_unknown(err: StoreUnavailable) -> WriteOutcomeUnknown:
    """A write the store had and did not answer: ``err`` retold as WriteOutcomeUnknown."""
    reason = wire.strip_path(str(err), err.path)
    return WriteOutcomeUnknown(
        f"the store did not answer the write, which may or may not be applied ({reason})", err.path
    )
