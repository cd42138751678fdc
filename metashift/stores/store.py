"""``Store``: what ``open_store`` returns, a backend with both interfaces."""

from __future__ import annotations

from .api import MetadataStore
from .bulk import BulkStore


class Store(MetadataStore, BulkStore):
    """An open store of one backend: Pulsar's ``MetadataStore`` API and the bulk interface."""

    async def __aenter__(self) -> Store:
        return self

    def _check_value(self, path: str, value: bytes) -> None:
        self._check_put(path, value, None)
