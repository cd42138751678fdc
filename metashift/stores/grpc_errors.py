"""What a gRPC error says about a call, for the stores that speak gRPC (etcd, Oxia)."""

from __future__ import annotations

import grpc

#: The codes of a call that did not get an answer from its server (the server may have applied it).
UNAVAILABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                               grpc.StatusCode.CANCELLED})
#: gRPC's words for a call it found no connection to send on.
_NOT_SENT_TEXT = ("failed to connect to all addresses", "Connection refused")


def never_sent(e: grpc.aio.AioRpcError) -> bool:
    """gRPC found no connection to the host to send the call on (it refused it, or none could be
    made): the call was not sent, so nothing of it applied."""
    details = e.details() or ""
    return e.code() is grpc.StatusCode.UNAVAILABLE and any(t in details for t in _NOT_SENT_TEXT)
