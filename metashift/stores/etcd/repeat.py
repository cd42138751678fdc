"""Many blind puts of a few keys: a sequence counter's steps, the intermediate puts of a long
version chain. etcd counts a key's version one put at a time and refuses a key twice in one txn,
so each step of a key is its own request; what can be saved is the client's work per request
(the ~100 us a gRPC call costs from Python, as much as etcd spends on it): every request of a
round is serialized once and sent as bytes (its response left undecoded), and keys that need
steps at the same time share them: round ``j`` is one txn holding step ``j`` of every key that
needs more than ``j`` steps (a plain put when one key is left)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from aetcd import rpc

from ..batching import OP_OVERHEAD, pack
from ..errors import MetadataStoreError, StoreUnavailable, ValueTooLarge
from .connection import EtcdConnection

#: Requests kept in flight (on one channel: more only costs the client more per request).
IN_FLIGHT = 128

_PUT = "/etcdserverpb.KV/Put"
_TXN = "/etcdserverpb.KV/Txn"
_METHODS = (_PUT, _TXN)

#: (key, value, count, tag): ``count`` blind puts of ``value`` on ``key``.
Chain = tuple[bytes, bytes, int, Any]


def too_big(error: MetadataStoreError) -> bool:
    """The server refused a request for its number of operations or its size."""
    text = str(error)
    return "too many operations" in text or "too large" in text or "RESOURCE_EXHAUSTED" in text


class _Round:
    """A request sent ``times`` times: one put, or one txn of puts of distinct keys."""

    def __init__(self, chains: list[Chain], times: int) -> None:
        self.chains, self.times = chains, times
        puts = [rpc.PutRequest(key=k, value=v) for k, v, _, _ in chains]
        if len(puts) == 1:
            self.method, self.body = _PUT, puts[0].SerializeToString()
        else:
            ops = [rpc.RequestOp(request_put=p) for p in puts]
            self.method, self.body = _TXN, rpc.TxnRequest(success=ops, failure=[]).SerializeToString()

    def split(self) -> list[_Round]:
        return [_Round([c], 1) for c in self.chains]


def _rounds(chains: list[Chain], max_ops: int, max_bytes: int) -> Iterator[_Round]:
    """The rounds of ``chains``, longest first: while ``m`` chains still need steps, their next
    steps go together (cut to the txn budgets)."""
    ordered = sorted((c for c in chains if c[2] > 0), key=lambda c: -c[2])
    done = 0
    for m in range(len(ordered), 0, -1):
        times = ordered[m - 1][2] - done
        if times <= 0:
            continue
        live = ordered[:m]
        sizes = [(1, len(k) + len(v) + OP_OVERHEAD) for k, v, _, _ in live]
        for group in pack(sizes, max_ops, max_bytes):
            yield _Round([live[i] for i in group], times)
        done += times


async def repeat_puts(
    conn: EtcdConnection,
    chains: list[Chain],
    failed: dict[Any, MetadataStoreError],
    max_ops: int,
    max_bytes: int,
    in_flight: int = IN_FLIGHT,
) -> None:
    """Put each chain's value ``count`` times on its key (module doc). A failure is recorded in
    ``failed[tag]`` (that chain's other steps are dropped); a txn the server refuses for its
    size is sent as one put per key instead. Returns when every request sent has ended."""
    path_of = conn.keys.path_of
    work: Iterator[tuple[str, bytes, list[Chain]]] = (
        (r.method, r.body, r.chains) for r in _rounds(chains, max_ops, max_bytes) for _ in range(r.times)
    )
    calls: dict[str, Any] = {}
    channel: Any = None

    async def send(method: str, body: bytes, mine: list[Chain]) -> None:
        nonlocal channel, calls
        if conn.channel is not channel:  # the first call, or a failover: to the channel in use
            channel = conn.channel
            if channel is None:
                raise StoreUnavailable("store is closed", path_of(mine[0][0]))
            calls = {m: channel.unary_unary(m, request_serializer=None, response_deserializer=None) for m in _METHODS}
        call = calls[method]
        path = path_of(mine[0][0])
        try:
            await conn.call(path, lambda md: call(body, timeout=conn.timeout, metadata=md))
        except MetadataStoreError as e:
            if not too_big(e):  # unavailable, full, ...: whether applied is unknown
                for chain in mine:
                    failed.setdefault(chain[3], e)
            elif len(mine) > 1:
                for one in _Round(mine, 1).split():
                    await send(one.method, one.body, one.chains)
            else:
                key, value, _, tag = mine[0]
                failed.setdefault(tag, ValueTooLarge(path_of(key) or "?", len(value), max_bytes))

    async def worker() -> None:
        for method, body, mine in work:
            live = [c for c in mine if c[3] not in failed]
            if not live:
                continue
            if len(live) < len(mine):
                one = _Round(live, 1)
                method, body = one.method, one.body
            await send(method, body, live)

    total = sum(max(c[2], 0) for c in chains)
    await asyncio.gather(*(worker() for _ in range(min(in_flight, total))))
