"""Oxia backend of the store layer, in Pulsar's own ``OxiaMetadataStore`` layout, so that after a
migration Pulsar can read Oxia directly. It speaks Oxia's gRPC client protocol itself
(``proto/oxia/v1/client.proto``): the ``oxia`` package on PyPI predates the version overrides a
version-preserving copy needs.

``store.OxiaStore`` opens and closes it and delegates to its parts, one module each:

- ``connection``: the shard assignments, the channels and the error mapping; ``keys``: paths,
  keys, Oxia's hash and key order; ``session``: the per-shard sessions and their keep-alive;
- ``records``: a record read, put or listed on its shards (``batcher``: requests shared among
  the calls of one event-loop turn); ``operations``: single operations;
- ``watches``: the notifications;
- ``tree_reads``: the copy's walk and reads of subtrees; ``restores``: its writes at given
  versions; ``sequence_counters``: the counters behind sequential names.
"""

from __future__ import annotations

from .operations import MAX_VALUE_SIZE
from .store import OxiaStore

__all__ = ["MAX_VALUE_SIZE", "OxiaStore"]
