"""``SequenceCounters``: ZooKeeper's sequence counters, read from a parent's Stat and raised by
(create, delete) pairs of a throw-away child (``counter_bumps``)."""

from __future__ import annotations

import asyncio

from aiozk import exc as zk_exc

from .. import errors, paths
from ..api import MetadataStore
from ..bulk import COUNTER_PROBE
from .calls import Calls
from .counter_bumps import MULTI_SECONDS, BumpMulti, send_bumps
from .errors import map_error
from .operations import Operations


class SequenceCounters:
    """Reads a parent's sequence counter (from its Stat) and raises it by (create, delete) pairs
    of a throw-away child (``send_bumps``)."""

    def __init__(self, calls: Calls, operations: Operations, store: MetadataStore) -> None:
        self._calls = calls
        self._operations = operations
        self._store = store
        """The store whose ``put`` creates a missing parent (checked as any put is)."""

    async def children_version(self, path: str) -> int | None:
        """The ``cversion`` of ``path`` (its count of child creations and deletions), or ``None``
        when it does not exist. It bounds the next sequential suffix from above: ZooKeeper names
        a sequential child after the count of creations only (see ``sequence_counter``)."""
        zstat = await self._operations.exists_stat(paths.validate(path))
        return None if zstat is None else int(zstat.cversion)

    async def sequence_counter(self, parent: str) -> int:
        """ZooKeeper names a sequential child after the parent's count of child *creations*
        (its internal cversion). The cversion it reports counts creations and deletions
        (``2 * creations - live children``), so the count is ``(cversion + children) / 2``."""
        zstat = await self._operations.exists_stat(paths.validate(parent))
        if zstat is None:
            return 0
        return (int(zstat.cversion) + int(zstat.num_children)) // 2

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        """Every child creation moves the counter by one: (create, delete) pairs of a throw-away
        child in multis serialized once and sent many at a time (``counter_bumps``), until it
        is reached. The parent is created (empty) when missing."""
        paths.validate(parent)
        calls = self._calls
        counter = await self.sequence_counter(parent)
        if counter >= at_least:
            return 0
        if not await self._operations.exists(parent):
            await self._store.put(parent, b"")
            counter = await self.sequence_counter(parent)
        probe = calls.namespace.full(paths.join(parent, COUNTER_PROBE))
        steps = at_least - counter
        timeout = max(calls.url.call_timeout, MULTI_SECONDS)

        async def send(request: BumpMulti) -> int:
            future = calls.session.send_now(request)
            if future is None:
                raise errors.StoreUnavailable("the session is not connected", parent)
            try:
                async with asyncio.timeout(timeout):
                    _zxid, code = await future
            except (TimeoutError, OSError, zk_exc.ConnectError, zk_exc.ConnectionLoss, zk_exc.SessionExpired) as e:
                raise map_error(e, parent, calls.url) from e
            except zk_exc.ZKError as e:  # the whole multi refused (an error in the answer's header)
                return int(getattr(e, "error_code", -1) or -1)
            return int(code)

        try:
            await send_bumps(send, probe, calls.acl, steps)
        except RuntimeError as e:
            raise errors.MetadataStoreError(f"could not advance the sequence counter: {e}", parent) from None
        return 2 * steps
