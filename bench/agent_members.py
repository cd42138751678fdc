"""What the migration benchmarks with agent processes share: a kazoo member registered through its
agent as a broker or a bookie registers, its drop, and the wait for the migration's end."""

from __future__ import annotations

import asyncio
import contextlib
import time

from kazoo.client import KazooClient

from metashift.migration.flag import read_flag
from metashift.migration.phase import Phase
from metashift.stores import open_store


def registered_member(hosts: str, path: str) -> KazooClient:
    """A kazoo client registered (an ephemeral node at ``path``) as a broker or a bookie registers."""
    client = KazooClient(hosts=hosts, timeout=30)
    client.start(60)
    client.create(path, b"{}", ephemeral=True, makepath=True)
    return client


def drop_member(client: KazooClient) -> None:
    """Stop and close a member, whatever state its connection is in."""
    with contextlib.suppress(Exception):
        client.stop()
        client.close()


async def migration_ended(url: str, began: float, within: float) -> tuple[Phase, float]:
    """Poll the flag in the store at ``url`` every 0.2 s until it is COMPLETED and released (or
    FAILED): its phase and the seconds from ``began``; raises after ``within`` seconds."""
    async with await open_store(url, watch=False, create_root=False) as store:
        while time.monotonic() - began < within:
            flag = await read_flag(store)
            if flag is not None and (flag.phase is Phase.FAILED or (flag.phase is Phase.COMPLETED and flag.released)):
                return flag.phase, time.monotonic() - began
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the migration did not complete within {within:g}s")
