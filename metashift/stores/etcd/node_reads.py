"""``get_node`` calls made side by side, sent as one read-only txn.

A ZooKeeper-protocol front answers each getData, exists and getChildren with a node's value, Stat
and children: a txn of two ranges (the key; a keys-only range of the keys below it). With many
requests in flight each txn alone costs a gRPC call on both sides, more than etcd's own work for
it; so the calls of one event-loop turn share txns of up to ``NODES_PER_TXN`` nodes (etcd
answers a read-only txn at one revision, as it answers each range). Nothing waits for a txn to
fill: a lone call is sent in the turn it was made.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aetcd import rpc

from .connection import EtcdConnection
from .keys import prefix_end

#: Nodes per txn: two ranges each, within etcd's default ``--max-txn-ops`` (128).
NODES_PER_TXN = 32

#: A node's two ranges' answers: the key's, and the keys-only listing of the keys below it.
NodeAnswer = tuple[Any, Any]


class NodeReads:
    """Sends the ``get_node`` reads of one event-loop turn together, ``NODES_PER_TXN`` per txn."""

    def __init__(self, conn: EtcdConnection, page: int) -> None:
        self._conn = conn
        self._page = page
        self._pending: list[tuple[str, bytes, bytes, asyncio.Future[NodeAnswer]]] = []
        self._tasks: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references

    async def read(self, path: str, key: bytes, prefix: bytes) -> NodeAnswer:
        """The answers of the range of ``key`` and of the first page of keys below ``prefix``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[NodeAnswer] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((path, key, prefix, future))
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        loop = asyncio.get_running_loop()
        for start in range(0, len(pending), NODES_PER_TXN):
            task = loop.create_task(self._send(pending[start : start + NODES_PER_TXN]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, calls: list[tuple[str, bytes, bytes, asyncio.Future[NodeAnswer]]]) -> None:
        ops = []
        for _, key, prefix, _ in calls:
            ops.append(rpc.RequestOp(request_range=rpc.RangeRequest(key=key)))
            ops.append(rpc.RequestOp(request_range=rpc.RangeRequest(
                key=prefix, range_end=prefix_end(prefix), keys_only=True, limit=self._page)))
        try:
            # an error names the path when the txn had one node: as the call alone would
            resp = await self._conn.txn(calls[0][0] if len(calls) == 1 else None,
                                        rpc.TxnRequest(compare=[], failure=[], success=ops))
        except BaseException as err:  # every call of the txn fails with it
            for *_, future in calls:
                if not future.done():
                    future.set_exception(err)
            if not isinstance(err, Exception):
                raise
            return
        answers = resp.responses
        for i, (*_, future) in enumerate(calls):
            if not future.done():
                future.set_result((answers[2 * i].response_range, answers[2 * i + 1].response_range))
