"""Oxia backend of the store layer, in Pulsar's own ``OxiaMetadataStore`` layout, so that after a
migration Pulsar can read Oxia directly. It speaks Oxia's gRPC client protocol itself
(``proto/oxia/v1/client.proto``): the ``oxia`` package on PyPI predates the version overrides a
version-preserving copy needs.

``store.py`` opens and closes it; ``connection.py`` holds the shard assignments, the channels and
the error mapping; ``keys.py`` paths, keys, Oxia's hash and key order; ``batcher.py`` shares
requests among the calls of one event-loop turn; ``session.py`` the per-shard sessions and their
keep-alive; ``watches.py`` the notifications; ``operations.py`` single operations; ``bulk.py`` the
walk, restores, counters and positions.
"""

from __future__ import annotations

from .operations import MAX_VALUE_SIZE
from .store import OxiaStore

__all__ = ["MAX_VALUE_SIZE", "OxiaStore"]
