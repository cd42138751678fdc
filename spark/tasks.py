"""What runs in the Spark executors (and, for the top of the tree, in the driver): the copy and
the verification of whole subtrees, listing included.

Pickle-safe by construction: module-level functions over plain data (URL strings, ``Rules``, lists
of root paths). Each task opens its own source and target stores (without watches), runs its
asyncio loop, and returns one plain dict. Store errors do not escape as task failures (Spark would
retry or wrap them): they come back in the dict, named, and the driver raises them.

The copy of a partition streams its pages (``page_copy``); the verification compares two streams
(``page_verify``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from metashift.copy.rules import Rules
from metashift.stores import MetadataStoreError, Store, open_store
from metashift.stores.aio import run_loop

from .page_copy import copy_pages, move_counter, new_copy_result, read_levels
from .page_verify import new_verify_result, verify_pages, verify_top

#: A partition that failed because a store did not answer is run again (the copy resumes where
#: it stopped: it reads the target first), after 2 s, then 4 s.
RETRIES = 2


def _error(e: MetadataStoreError) -> dict[str, Any]:
    return {"type": type(e).__name__, "message": str(e), "path": e.path}


async def _with_stores(
    source_url: str, target_url: str, body: Callable[[Store, Store], Awaitable[None]]
) -> None:
    source = await open_store(source_url, watch=False, create_root=False)
    try:
        target = await open_store(target_url, watch=False)
        try:
            await body(source, target)
        finally:
            await target.close()
    finally:
        await source.close()


# ---- running a task -------------------------------------------------------------------------------


def _with_retries(attempt: Callable[[], dict]) -> dict:
    """Run ``attempt`` again while it fails with ``StoreUnavailable`` (not ``StoreFull``), up to
    ``RETRIES`` times; the writes of failed attempts are kept in the count."""
    result = attempt()
    writes = 0
    for n in range(RETRIES):
        error = result["error"]
        if error is None or error["type"] != "StoreUnavailable":
            break
        writes += result.get("write_ops", 0)
        time.sleep(2 ** (n + 1))
        result = attempt()
        result["retries"] = n + 1
    if "write_ops" in result:
        result["write_ops"] += writes
    return result


def _partition(
    work: Callable[[list[str], str, str, Rules], Coroutine[Any, Any, dict]],
    roots: list[str], source_url: str, target_url: str, rules: Rules, progress: Any,
) -> dict:
    """Run ``work`` on one partition with retries; ``progress`` is an optional pair of Spark
    accumulators (nodes, bytes)."""
    result = _with_retries(lambda: run_loop(work(roots, source_url, target_url, rules)))
    if progress is not None:
        progress[0].add(result["nodes"])
        progress[1].add(result["bytes"])
    return result


# ---- the copy -------------------------------------------------------------------------------------


def copy_partition(roots: list[str], source_url: str, target_url: str, rules: Rules, progress: Any = None) -> dict:
    """Copy the subtrees of one partition (executor side): listed, read and written here."""
    return _partition(_copy, roots, source_url, target_url, rules, progress)


async def _copy(roots: list[str], source_url: str, target_url: str, rules: Rules) -> dict:
    out = new_copy_result()

    async def body(source: Store, target: Store) -> None:
        known = None
        if not target.needs_parents:  # etcd: the target's side of the partition in one range scan
            known = {n.path: n async for page in target.read_trees(roots, prune=rules.excluded) for n in page}
        await copy_pages(source, target, source.read_trees(roots, prune=rules.excluded), rules, out, known=known)

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out


async def copy_top(source: Store, target: Store, levels: list[list[str]], rules: Rules) -> dict:
    """Copy the top of the tree (the driver's part), level by level, parents first. Its
    counters are left to the caller (``out["deferred_counters"]``), to move beside the job."""
    out = new_copy_result()
    await copy_pages(source, target, read_levels(source, levels), rules, out, defer_counters=True)
    return out


async def move_counters(source_url: str, target_url: str, parents: list[str], rules: Rules) -> dict[str, Any]:
    """Carry the sequence counters of ``parents`` (the driver's, beside the Spark job)."""
    out = new_copy_result()

    async def body(source: Store, target: Store) -> None:
        await asyncio.gather(*(move_counter(source, target, p, rules, out) for p in parents))

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out


# ---- the verification -----------------------------------------------------------------------------


def verify_partition(roots: list[str], source_url: str, target_url: str, rules: Rules, progress: Any = None) -> dict:
    """Verify the subtrees of one partition (executor side): both sides listed and read here."""
    return _partition(_verify, roots, source_url, target_url, rules, progress)


async def _verify(roots: list[str], source_url: str, target_url: str, rules: Rules) -> dict:
    out = new_verify_result()

    async def body(source: Store, target: Store) -> None:
        await verify_pages(
            source, target, source.read_trees(roots, prune=rules.excluded),
            target.read_trees(roots, prune=rules.excluded), rules, out,
        )  # fmt: skip

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out


__all__ = ["copy_partition", "copy_top", "move_counters", "verify_partition", "verify_top"]
