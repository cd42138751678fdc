"""What the gateway's services share about a gRPC call: a request that does not decode becomes a
``Malformed`` (answered INVALID_ARGUMENT, never a bare gRPC error), and a call ends with a
metashift error as its status code and ``metashift.v1.Error`` detail (see ``wire``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.stores.errors import MetadataStoreError


class Malformed:
    """What a request that does not decode becomes; the handler answers INVALID_ARGUMENT."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def decoder(message: Any) -> Callable[[bytes], Any]:
    """A request deserializer that gives a ``Malformed`` instead of raising."""

    def decode(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except Exception as exc:  # google.protobuf.message.DecodeError and kin
            return Malformed(f"cannot decode {message.DESCRIPTOR.full_name}: {exc}")

    return decode


@dataclass(frozen=True, slots=True)
class Failure:
    """How a call failed: the metashift detail and the status code it ends with."""

    detail: pb.Error
    code: grpc.StatusCode


async def abort(context: grpc.aio.ServicerContext, error: MetadataStoreError) -> None:
    """End the call with ``error``'s status code and its machine-readable details."""
    await end_call(context, *wire.error_to_pb(error))


async def end_call(context: grpc.aio.ServicerContext, detail: pb.Error, code: grpc.StatusCode) -> None:
    """End the call with ``code`` and ``detail`` in its message and trailing metadata."""
    await context.abort(code, wire.status_message(detail), trailing_metadata=wire.trailers(detail))
