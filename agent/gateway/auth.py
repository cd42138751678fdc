"""Caller authentication on the gateway: a shared bearer token.

With ``auth.token_file`` set, every call must carry the metadata ``authorization: Bearer
<token>``; any other call ends with UNAUTHENTICATED before a handler runs, so nothing is read or
written. Health checks stay open (orchestrators probe without credentials). This authenticates
callers on TCP with server-only TLS, and on unix sockets beside the file mode; mutual TLS
(``tls.client_ca``) refuses clients earlier, in the TLS handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from metashift.proto import wire
from metashift.proto.errors import Unauthenticated
from metashift.proto.wire import AUTH_METADATA_KEY as METADATA_KEY

_OPEN_SERVICES = ("/grpc.health.v1.Health/",)
#: How long a refused streaming call waits for the caller's first message (see ``_refusing``).
_FIRST_MESSAGE_WAIT = 5.0


def read_token(path: Path) -> str:
    """The token in ``path`` (surrounding white space ignored); empty is refused by the config."""
    return path.read_text().strip()


class TokenAuth(grpc.aio.ServerInterceptor):
    """Refuses every call (but health checks) that does not present the bearer token."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(_OPEN_SERVICES) or self._presented(details):
            return handler
        return _refusing(handler)

    def _presented(self, details: grpc.HandlerCallDetails) -> bool:
        for key, value in details.invocation_metadata or ():
            if key == METADATA_KEY:
                given = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(given, self._expected)  # no timing side channel
        return False


def _refusing(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that only refuses the call."""

    streaming = handler.request_streaming

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        if streaming:
            # Read the caller's first message before refusing: a stream ended while the caller's
            # first write is still in flight fails that write in gRPC's core, and the caller then
            # sees INTERNAL ("Internal error from Core") instead of UNAUTHENTICATED.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(anext(aiter(request), None), _FIRST_MESSAGE_WAIT)
        detail, code = wire.error_to_pb(Unauthenticated("missing or wrong bearer token (auth.token_file)"))
        await context.abort(code, wire.status_message(detail), trailing_metadata=wire.trailers(detail))

    kinds = {
        "unary_unary": grpc.unary_unary_rpc_method_handler,
        "unary_stream": grpc.unary_stream_rpc_method_handler,
        "stream_unary": grpc.stream_unary_rpc_method_handler,
        "stream_stream": grpc.stream_stream_rpc_method_handler,
    }
    for attribute, make in kinds.items():
        if getattr(handler, attribute) is not None:
            return make(
                refuse,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return handler
