"""``Restores``: the copy's writes of nodes at given versions, in pipelined ``multi`` requests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiozk import protocol

from .. import errors
from ..api import MetadataStore
from ..batching import OP_OVERHEAD, pack
from ..bulk import Restore, restore_by_puts
from ..ops import GetOp
from .calls import Calls
from .operations import MULTI_MAX_BYTES, MULTI_MAX_OPS, multi_request

#: multis in flight.
_MULTIS_IN_FLIGHT = 8


class Restores:
    """Brings nodes to given values at given versions (``BulkStore.restore_many``), many in one
    ``multi``; what a multi could not do is finished by the store's own puts."""

    def __init__(self, calls: Calls, store: MetadataStore) -> None:
        self._calls = calls
        self._store = store
        """The store whose ``batch`` reads the nodes again and whose puts finish a failed multi's."""

    async def restore_many(self, items: Sequence[Restore]) -> list[int | errors.MetadataStoreError]:
        """Each node's chain (create, then setData at each version, empty values until the last
        one) goes in ``multi`` requests: ZooKeeper applies the same path many times in one
        multi. Short chains share multis, pipelined; a chain longer than one multi is sent multi
        after multi. A multi that fails (a parent missing, a version moved) changed nothing: its
        nodes are read again and finished by single puts, which name the culprits."""
        results: list[int | errors.MetadataStoreError] = [0] * len(items)
        retry: set[int] = set()
        sem = asyncio.Semaphore(_MULTIS_IN_FLIGHT)
        calls = self._calls

        def chain(item: Restore) -> list[tuple[Any, int]]:
            full = calls.namespace.full(item.path)
            out: list[tuple[Any, int]] = []
            version = item.current
            if version == -1:
                value = item.value if item.version == 0 else b""
                out.append((calls.create_request(full, value, False, False), len(full) + len(value) + OP_OVERHEAD))
                version = 0
            while version < item.version:
                value = item.value if version + 1 == item.version else b""
                request = protocol.SetDataRequest(path=full, data=value, version=version)
                out.append((request, len(full) + len(value) + OP_OVERHEAD))
                version += 1
            return out

        async def send(requests: list[Any], owners: list[int]) -> bool:
            multi = multi_request()
            for r in requests:
                multi.add(r)
            async with sem:
                try:
                    response = await calls.call(multi, items[owners[0]].path)
                except errors.StoreUnavailable as e:
                    for i in owners:
                        results[i] = e
                    return False
                except errors.MetadataStoreError:
                    response = None
            answers = None if response is None else response.responses
            if answers is None or len(answers) != len(requests) or any(isinstance(a, Exception) for a in answers):
                retry.update(i for i in owners if not isinstance(results[i], errors.MetadataStoreError))
                return False
            return True

        async def long_chain(i: int, ops: list[tuple[Any, int]]) -> None:
            for group in pack([(1, n) for _, n in ops], MULTI_MAX_OPS, MULTI_MAX_BYTES):
                if not await send([ops[k][0] for k in group], [i]):
                    return

        todo = [i for i, item in enumerate(items) if item.current < item.version]
        chains = [chain(items[i]) for i in todo]
        jobs: list[Any] = []
        for group in pack([(len(c), sum(n for _, n in c)) for c in chains], MULTI_MAX_OPS, MULTI_MAX_BYTES):
            if len(group) == 1 and (
                len(chains[group[0]]) > MULTI_MAX_OPS or sum(n for _, n in chains[group[0]]) > MULTI_MAX_BYTES
            ):
                jobs.append(long_chain(todo[group[0]], chains[group[0]]))
            else:
                jobs.append(send([r for k in group for r, _ in chains[k]], [todo[k] for k in group]))
        await asyncio.gather(*jobs)
        if retry:
            order = sorted(retry)
            fresh = await self._store.batch([GetOp(items[i].path) for i in order])
            again: list[Restore] = []
            for i, got in zip(order, fresh, strict=True):
                item = items[i]
                current = got[1].version if isinstance(got, tuple) else -1
                if isinstance(got, errors.MetadataStoreError):
                    results[i] = got
                elif current > item.version:
                    results[i] = errors.BadVersion(item.path, f"version {current} is past {item.version}")
                else:
                    again.append(Restore(item.path, item.value, item.version, current))
            redone = await restore_by_puts(self._store, again)
            by_path = {r.path: res for r, res in zip(again, redone, strict=True)}
            for i in order:
                if items[i].path in by_path:
                    res = by_path[items[i].path]
                    ok = not isinstance(res, errors.MetadataStoreError)
                    results[i] = items[i].version - items[i].current if ok else res
        for i, item in enumerate(items):
            if results[i] == 0 and item.current < item.version:
                results[i] = item.version - item.current
        return results
