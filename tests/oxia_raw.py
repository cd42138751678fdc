"""An Oxia record as the server holds it, read past the store's mapping (its ``version_id``, its
``modifications_count``): what a broker reading Oxia natively sees beside what the agent shows."""

from __future__ import annotations

from typing import Any

from metashift.stores import Store
from metashift.stores.oxia import OxiaStore
from metashift.stores.oxia.proto import client_pb2 as pb


async def raw_record(store: Store, path: str) -> Any:
    """The ``GetResponse`` of ``path``'s record (status, value, version), on the shard Oxia's hash
    names for its key."""
    assert isinstance(store, OxiaStore)
    conn = store._conn
    key = store._keys.key(path)
    shard = conn.shard_for(key)
    request = pb.ReadRequest(shard=shard.id, gets=[pb.GetRequest(key=key, include_value=True)])
    (answer,) = await conn.streamed(None, "Read", shard, request)
    return answer.gets[0]
