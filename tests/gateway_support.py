"""What several gateway tests share: a store whose writes are slow, a Session stream opened by hand."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from metashift import MetadataStore, Stat
from metashift.proto import wire
from metashift.proto.v1 import gateway_pb2 as pb
from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc
from metashift.stores.ops import GetResult


class SlowStore(MetadataStore):
    """A store whose writes take ``delay`` seconds: writes stay "in flight" long enough to drain."""

    def __init__(self, inner: MetadataStore, delay: float) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.delay = delay
        self.max_value_size = inner.max_value_size

    async def _get(self, path: str) -> GetResult:
        return await self.inner.get(path)

    async def _get_children(self, path: str) -> list[str]:
        return await self.inner.get_children(path)

    async def _exists(self, path: str) -> bool:
        return await self.inner.exists(path)

    async def _put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        await asyncio.sleep(self.delay)
        return await self.inner.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)

    async def _delete(self, path: str, expected_version: int | None) -> None:
        await self.inner.delete(path, expected_version)

    async def close(self) -> None:
        pass


async def raw_session(channel: grpc.aio.Channel, hello: pb.Hello) -> tuple[Any, Any, tuple[tuple[str, str], ...]]:
    """A Session stream opened by hand, without the client library: the call, the agent's first
    answer, and the call metadata that names the session."""
    call = pb_grpc.SessionStub(channel).Open()
    await call.write(pb.SessionRequest(hello=hello))
    started = await call.read()
    return call, started, ((wire.SESSION_KEY, started.started.session_id),)
