"""Oxia's own floor for the copy benchmark: what the server takes to store a tree when driven
directly, with the options a version-preserving copy uses.

Every node is written once, as the copy writes it into Oxia: a ``PutRequest`` with the value and
Oxia's ``override_version_id`` and ``override_modifications_count`` set to the node's version, the
puts of each shard packed into ``WriteRequest`` messages of ``PUTS_PER_WRITE``, ``IN_FLIGHT`` of them
at once per shard, on the shard leaders' channels: no store layer, no checks, no parents, nothing
read back. The keys are deleted again afterwards (untimed), so that the copy starts on an empty
target.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from metashift.stores import open_store, parse_url
from metashift.stores.notifications import SessionEvent
from metashift.stores.oxia.connection import Liveness, OxiaConnection, Shard
from metashift.stores.oxia.keys import Keys
from metashift.stores.oxia.proto import client_pb2 as pb

#: Puts per WriteRequest, and requests in flight per shard.
PUTS_PER_WRITE = 128
IN_FLIGHT = 8
#: Seconds the floor's connection may take to learn the shard assignments.
OPEN_SECONDS = 30.0


def _ignore(event: SessionEvent) -> None:
    return None


async def raw_oxia_writes(source_url: str, oxia_url: str, all_paths: list[str]) -> dict[str, Any]:
    """Every node of ``all_paths`` (read from ``source_url``, untimed) written once into
    ``oxia_url`` with the version overrides, pipelined per shard: the floor of the copy's writes."""
    source = await open_store(source_url, watch=False)
    try:
        nodes: list[tuple[str, bytes, int]] = []
        for i in range(0, len(all_paths), 2000):
            for r in await source.read_many(all_paths[i : i + 2000]):
                if r is not None:
                    nodes.append((r.path, r.value, r.version))
    finally:
        await source.close()
    url = parse_url(oxia_url)
    keys = Keys(url.root)
    conn = OxiaConnection(url, Liveness(_ignore))
    await conn.open(asyncio.get_running_loop().time() + OPEN_SECONDS)
    try:
        by_shard: dict[int, tuple[Shard, list[Any]]] = {}
        for path, value, version in nodes:
            key = keys.key(path)
            shard = conn.shard_for(key)
            by_shard.setdefault(shard.id, (shard, []))[1].append(
                pb.PutRequest(key=key, value=value, override_version_id=version, override_modifications_count=version))
        started = time.monotonic()
        await asyncio.gather(*(_write_shard(conn, shard, puts) for shard, puts in by_shard.values()))
        seconds = time.monotonic() - started
        for shard, puts in by_shard.values():  # untimed: leave the room to the copy
            for i in range(0, len(puts), PUTS_PER_WRITE):
                chunk = [pb.DeleteRequest(key=p.key) for p in puts[i : i + PUTS_PER_WRITE]]
                await conn.unary(None, "Write", shard, pb.WriteRequest(shard=shard.id, deletes=chunk))
    finally:
        await conn.close()
    return {"writes": len(nodes), "shards": len(by_shard), "seconds": round(seconds, 2),
            "writes_per_second": round(len(nodes) / seconds) if seconds else 0}


async def _write_shard(conn: OxiaConnection, shard: Shard, puts: list[Any]) -> None:
    sem = asyncio.Semaphore(IN_FLIGHT)

    async def write(chunk: list[Any]) -> None:
        async with sem:
            response = await conn.unary(None, "Write", shard, pb.WriteRequest(shard=shard.id, puts=chunk))
            failed = [p for p in response.puts if p.status != pb.OK]
            if failed:
                raise RuntimeError(f"Oxia refused {len(failed)} raw put(s) on shard {shard.id}: {failed[0]}")

    await asyncio.gather(*(write(puts[i : i + PUTS_PER_WRITE]) for i in range(0, len(puts), PUTS_PER_WRITE)))
