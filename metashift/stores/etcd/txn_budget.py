"""``TxnBudget``: how many operations and bytes a bulk txn may hold, learnt from the server."""

from __future__ import annotations

from typing import Any

from ..errors import MetadataStoreError
from .connection import EtcdConnection
from .operations import TXN_MAX_BYTES, TXN_MAX_OPS


class TxnTooBig(Exception):
    """The server refused a txn for its number of operations or its size."""


class TxnBudget:
    """The operations and bytes of the bulk writes' txns (restores, sequence counters), starting
    at etcd's defaults and shrinking when the server's limits are lower (it refuses a txn)."""

    def __init__(self, conn: EtcdConnection) -> None:
        self._conn = conn
        self.ops = TXN_MAX_OPS
        self.bytes = TXN_MAX_BYTES

    async def txn(self, request: Any) -> Any:
        """One txn; ``TxnTooBig`` (after shrinking the budget) when the server refuses its size."""
        try:
            return await self._conn.txn(None, request)
        except MetadataStoreError as e:
            text = str(e)
            if "too many operations" in text:
                self.ops = max(1, min(self.ops, len(request.success)) // 2)
                raise TxnTooBig from None
            if "too large" in text or "RESOURCE_EXHAUSTED" in text:
                self.bytes = max(1024, min(self.bytes, request.ByteSize()) // 2)
                raise TxnTooBig from None
            raise
