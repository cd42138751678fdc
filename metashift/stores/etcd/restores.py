"""``Restores``: the copy's writes of nodes at given versions on etcd, many txns in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aetcd import rpc

from ..batching import OP_OVERHEAD, pack
from ..bulk import Restore
from ..errors import BadVersion, MetadataStoreError, ValueTooLarge
from .connection import EtcdConnection
from .keys import Keys
from .operations import compare
from .repeat import Chain, repeat_puts
from .txn_budget import TxnBudget, TxnTooBig

#: Txns a bulk write keeps in flight; the final puts of a restore.
_BULK_TXNS_IN_FLIGHT = 32
_FINAL_TXNS_IN_FLIGHT = 8


class Restores:
    """Brings keys to given values at given versions (``BulkStore.restore_many``): blind puts of
    empty bytes to count the versions up, then a conditional put of the value."""

    def __init__(self, conn: EtcdConnection, keys: Keys, budget: TxnBudget) -> None:
        self._conn = conn
        self._keys = keys
        self._budget = budget

    async def restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        """Keeping version V takes V+1 puts of the key, each in its own txn (etcd refuses a key
        twice in one txn). The intermediate puts are blind puts of empty bytes, and since only
        their number matters they go in parallel: packed so that every txn holds distinct keys
        and stays within the server's op and size limits (learnt when the server refuses a
        txn: the budgets shrink and the txn is split). Then one final put per node with its
        value, conditional on the version the intermediate puts must have left, so a count gone
        wrong is a ``BadVersion``, never a wrong version. A final txn whose compare fails is
        redone key by key to find the culprits."""
        results: list[int | MetadataStoreError] = [0] * len(items)
        todo = [i for i, item in enumerate(items) if item.current < item.version]
        if not todo:
            return results
        keys = {i: self._keys.key(items[i].path) for i in todo}
        # -- intermediate puts: key i needs (version - current - 1) of them, in distinct txns
        need = {i: items[i].version - items[i].current - 1 for i in todo}
        failed: dict[int, MetadataStoreError] = {}
        await self.blind_puts([(keys[i], b"", n, i) for i, n in need.items() if n > 0], failed)
        # -- final puts, with the value, conditional on the version left by the puts before
        finals = [i for i in todo if i not in failed]

        def final_put(i: int) -> tuple[Any, Any]:
            item = items[i]
            put = rpc.RequestOp(request_put=rpc.PutRequest(key=keys[i], value=item.value))
            return compare(keys[i], item.version - 1), put

        sizes = [(1, len(keys[i]) + len(items[i].value) + OP_OVERHEAD) for i in finals]
        chunks = [[finals[k] for k in group] for group in pack(sizes, self._budget.ops, self._budget.bytes)]
        sem = asyncio.Semaphore(_FINAL_TXNS_IN_FLIGHT)

        async def run_final(chunk: list[int]) -> None:
            ops = [final_put(i) for i in chunk]
            request = rpc.TxnRequest(compare=[c for c, _ in ops], success=[p for _, p in ops], failure=[])
            async with sem:
                try:
                    resp = await self._budget.txn(request)
                    too_big = False
                except TxnTooBig:
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
                    ValueTooLarge(item.path, len(item.value), self._budget.bytes)
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

    async def blind_puts(
        self, wanted: list[tuple[bytes, bytes, int, int]], failed: dict[int, MetadataStoreError]
    ) -> None:
        """``count`` blind puts of ``value`` on each ``key``, in txns of distinct keys, many in
        flight. ``wanted``: (key, value, count, tag); a failure is recorded in ``failed[tag]``."""
        if not wanted:
            return
        total = sum(n for _, _, n, _ in wanted)
        per_op = max(len(k) + len(v) + OP_OVERHEAD for k, v, _, _ in wanted)
        per_txn = max(1, min(self._budget.ops, self._budget.bytes // per_op))
        # as many txns as full ones would take; a chain longer than that puts one op in each of
        # them and sends the rest in rounds shared with the other long chains (``repeat_puts``)
        n_txns = max(1, -(-total // per_txn))
        txns: list[list[tuple[bytes, bytes, int, Any]]] = [[] for _ in range(n_txns)]
        singles: list[Chain] = []
        slot = 0
        for key, value, count, tag in sorted(wanted, key=lambda w: -w[2]):
            op = rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))  # one message, reused
            in_txns = min(count, n_txns)
            for k in range(in_txns):  # the txns it lands in are distinct
                txns[(slot + k) % n_txns].append((key, value, tag, op))
            slot += in_txns
            if count > in_txns:
                singles.append((key, value, count - in_txns, tag))
        sem = asyncio.Semaphore(_BULK_TXNS_IN_FLIGHT)

        async def send(ops: list[tuple[bytes, bytes, int, Any]]) -> None:
            if not ops or all(op[2] in failed for op in ops):
                return
            async with sem:
                request = rpc.TxnRequest(success=[op[3] for op in ops], failure=[])
                try:
                    await self._budget.txn(request)
                    return
                except TxnTooBig:
                    if len(ops) == 1:
                        key, value, tag, _ = ops[0]
                        failed[tag] = ValueTooLarge(self._keys.path_of(key) or "?", len(value), self._budget.bytes)
                        return
                except MetadataStoreError as e:  # unavailable, full, ...: whether applied is unknown
                    for op in ops:
                        failed.setdefault(op[2], e)
                    return
            half = len(ops) // 2
            await asyncio.gather(send(ops[:half]), send(ops[half:]))

        # the rest of the long chains: their steps share rounds of their own
        rest = repeat_puts(self._conn, singles, failed, self._budget.ops, self._budget.bytes)
        await asyncio.gather(*(send(t) for t in txns), rest)
