"""Batches sent as the server's own batch requests (ZooKeeper ``multi``, etcd ``txn``), written
once for every backend, as Pulsar's ``AbstractBatchedMetadataStore`` does.

``pack`` cuts work into requests within a server's limits (operations and bytes). ``BatchedStore``
runs ``MetadataStore.batch`` on it: each backend says which operations may share a request
(``_batch_kind``) and sends one request (``_send_batch``); a request the server refused as a whole
is run again one operation at a time, and a request whose outcome is unknown (the connection went)
is never sent twice: each of its operations reports the error.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Sequence

from .api import MetadataStore
from .errors import MetadataStoreError
from .ops import DeleteOp, Op, OpResult, PutOp

#: Rough framing cost of one operation inside a batch request.
OP_OVERHEAD = 64


def pack(items: Sequence[tuple[int, int]], max_ops: int, max_bytes: int) -> list[list[int]]:
    """Cut ``items``, each (operations, bytes), into consecutive groups (lists of indexes) of at
    most ``max_ops`` operations and ``max_bytes`` bytes. An item over a limit by itself goes alone."""
    groups: list[list[int]] = []
    group: list[int] = []
    ops = size = 0
    for i, (n, nbytes) in enumerate(items):
        if group and (ops + n > max_ops or size + nbytes > max_bytes):
            groups.append(group)
            group, ops, size = [], 0, 0
        group.append(i)
        ops += n
        size += nbytes
    if group:
        groups.append(group)
    return groups


def op_size(op: Op, path_bytes: int) -> int:
    """The bytes ``op`` takes in a batch request, its path (or key) taking ``path_bytes``."""
    return path_bytes + (len(op.value) if isinstance(op, PutOp) else 0) + OP_OVERHEAD


def is_write(op: Op) -> bool:
    """True for the operations that change the store."""
    return isinstance(op, PutOp | DeleteOp)


class BatchedStore(MetadataStore):
    """A ``MetadataStore`` whose batches go as the server's batch requests; a backend supplies
    ``_batch_kind``, ``_batch_size`` and ``_send_batch``."""

    #: Largest batch request the server takes: operations, bytes.
    batch_max_ops: int
    batch_max_bytes: int
    #: Batch requests, and single calls, that one batch keeps in flight.
    batch_requests_in_flight: int = 1 << 30
    batch_singles_in_flight: int = 1 << 30

    async def _batch(self, ops: list[Op]) -> list[OpResult]:
        """``ops`` name distinct paths (``batch`` cuts rounds so): every request runs concurrently."""
        results: list[OpResult] = [None] * len(ops)
        requests = asyncio.Semaphore(self.batch_requests_in_flight)
        singles_sem = asyncio.Semaphore(self.batch_singles_in_flight)
        kinds: dict[str, list[int]] = {}
        singles: list[int] = []
        for i, op in enumerate(ops):
            kind = self._batch_kind(op)
            if kind is None:
                singles.append(i)
            else:
                kinds.setdefault(kind, []).append(i)

        async def single(i: int) -> None:
            async with singles_sem:
                results[i] = await self._run_one(ops[i])

        async def request(members: list[int]) -> None:
            async with requests:
                answers = await self._run_request([ops[i] for i in members])
            for i, answer in zip(members, answers, strict=True):
                results[i] = answer

        jobs = []
        for members in kinds.values():
            sizes = [(1, self._batch_size(ops[i])) for i in members]
            for group in pack(sizes, self.batch_max_ops, self.batch_max_bytes):
                jobs.append(request([members[j] for j in group]))
        await asyncio.gather(*jobs, *(single(i) for i in singles))
        return results

    async def _run_request(self, ops: list[Op]) -> list[OpResult]:
        if len(ops) == 1:
            return [await self._run_one(ops[0])]
        try:
            answers = await self._send_batch(ops)
        except MetadataStoreError as e:  # whether it was applied is unknown: never sent again
            return [type(e)(str(e), op.path) for op in ops]
        if answers is None:  # refused as a whole, nothing applied: each alone gets its own answer
            return list(await asyncio.gather(*(self._run_one(op) for op in ops)))
        return answers

    # ---- what each backend supplies ---------------------------------------------------------------

    @abstractmethod
    def _batch_kind(self, op: Op) -> str | None:
        """Operations of the same kind may share a request; ``None``: ``op`` runs as a single call."""

    @abstractmethod
    def _batch_size(self, op: Op) -> int:
        """The bytes ``op`` takes in a request."""

    @abstractmethod
    async def _send_batch(self, ops: list[Op]) -> list[OpResult] | None:
        """Send ``ops`` (distinct paths, two or more) as one request: their results; ``None`` when
        the server refused the request as a whole and applied nothing; raises the
        ``StoreUnavailable`` (or ``AuthFailed``) that makes the outcome unknown."""
