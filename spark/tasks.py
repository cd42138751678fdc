"""What runs in the Spark executors: one function per partition, for the copy and the verification.

Pickle-safe by construction: module-level functions over plain data (URL strings, ``Rules``, lists
of tuples). Each task opens its own source and target stores (without watches), runs its asyncio
loop, and returns one plain dict. Store errors do not escape as task failures (Spark would retry
or wrap them): they come back in the dict, named, and the driver raises them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from metashift.stores import (
    BadVersion,
    GetOp,
    MetadataStoreError,
    OpResult,
    Restore,
    Store,
    open_store,
)
from metashift.stores.aio import run_loop

from .plan import Item
from .rules import Judgement, Rules, Side, Verdict, judge

#: A path and what the source and the target hold there (None: nothing).
Pair = tuple[str, Side | None, Side | None]

T = TypeVar("T")

#: Nodes read (from each side) per batch; the next batch is read while this one is written.
READ_CHUNK = 500
#: A partition that failed because a store did not answer is run again (the copy resumes where
#: it stopped: it reads the target first), after 2 s, then 4 s.
RETRIES = 2


def _error(e: MetadataStoreError) -> dict[str, Any]:
    return {"type": type(e).__name__, "message": str(e), "path": e.path}


def side_of(result: OpResult) -> Side | None:
    if isinstance(result, MetadataStoreError):
        raise result
    if result is None:
        return None
    assert isinstance(result, tuple)
    value, stat = result
    return Side(value, stat.version, stat.ephemeral)


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


async def _read_pairs(
    source: Store, target: Store, items: list[Item]
) -> Callable[[], Awaitable[list[Pair]]]:
    """Read ``items`` from both sides, ``READ_CHUNK`` at a time, one chunk ahead of the caller."""
    chunks = [items[i : i + READ_CHUNK] for i in range(0, len(items), READ_CHUNK)]

    async def read(chunk: list[Item]) -> list[Pair]:
        ops = [GetOp(path) for path, _, _ in chunk]
        got_source, got_target = await asyncio.gather(source.batch(ops), target.batch(ops))
        return [
            (path, side_of(s), side_of(t)) for (path, _, _), s, t in zip(chunk, got_source, got_target, strict=True)
        ]

    tasks = [asyncio.ensure_future(read(chunks[0]))] if chunks else []
    index = 0

    async def next_chunk() -> list[Pair]:
        nonlocal index
        if index >= len(chunks):
            return []
        current = tasks[index]
        index += 1
        if index < len(chunks):
            tasks.append(asyncio.ensure_future(read(chunks[index])))
        return await current

    return next_chunk


# ---- the copy -------------------------------------------------------------------------------------


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
    work: Callable[[list[Item], str, str, Rules], Coroutine[Any, Any, dict]],
    items: list[Item], source_url: str, target_url: str, rules: Rules, progress: Any,
) -> dict:
    """Run ``work`` on one partition with retries; ``progress`` is an optional pair of Spark
    accumulators (nodes, bytes)."""
    result = _with_retries(lambda: run_loop(work(items, source_url, target_url, rules)))
    if progress is not None:
        progress[0].add(len(items))
        progress[1].add(result["bytes"])
    return result


def judged(pairs: list[Pair], rules: Rules, out: dict[str, Any]) -> Iterator[tuple[str, Side, Side | None, Judgement]]:
    """The persistent source nodes of ``pairs`` with the judgement of their target side; nodes
    that vanished from the source and ephemerals are only counted (``out``), as are the nodes
    and bytes judged. Copy and verify see the tree through this one filter."""
    for path, src, tgt in pairs:
        if src is None:
            out["vanished"] += 1
            continue
        if src.ephemeral:
            out["ephemerals"] += 1
            continue
        out["nodes"] += 1
        out["bytes"] += len(src.value)
        yield path, src, tgt, judge(src, tgt, counter=rules.is_counter(path))


def copy_partition(items: list[Item], source_url: str, target_url: str, rules: Rules, progress: Any = None) -> dict:
    """Copy one partition (executor side)."""
    return _partition(_copy, items, source_url, target_url, rules, progress)


async def _copy(items: list[Item], source_url: str, target_url: str, rules: Rules) -> dict:
    out: dict[str, Any] = {
        "nodes": 0, "bytes": 0, "written": 0, "unchanged": 0, "ephemerals": 0, "vanished": 0,
        "write_ops": 0, "conflicts": [], "error": None,
    }  # fmt: skip

    async def body(source: Store, target: Store) -> None:
        next_chunk = await _read_pairs(source, target, items)
        while pairs := await next_chunk():
            restores: list[Restore] = []
            for path, src, tgt, j in judged(pairs, rules, out):
                if j.verdict is Verdict.EQUAL:
                    out["unchanged"] += 1
                elif j.verdict is Verdict.CONFLICT:
                    out["conflicts"].append((path, j.detail))
                else:
                    restores.append(Restore(path, src.value, src.version, -1 if tgt is None else tgt.version))
            if not restores:
                continue
            for restore, res in zip(restores, await target.restore_many(restores), strict=True):
                if isinstance(res, BadVersion):
                    out["conflicts"].append((restore.path, f"the target's node changed during the copy ({res})"))
                elif isinstance(res, MetadataStoreError):
                    raise res
                else:
                    out["written"] += 1
                    out["write_ops"] += res

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out


# ---- the verification -----------------------------------------------------------------------------


def verify_partition(items: list[Item], source_url: str, target_url: str, rules: Rules, progress: Any = None) -> dict:
    """Verify one partition (executor side)."""
    return _partition(_verify, items, source_url, target_url, rules, progress)


async def _verify(items: list[Item], source_url: str, target_url: str, rules: Rules) -> dict:
    out: dict[str, Any] = {"nodes": 0, "bytes": 0, "vanished": 0, "ephemerals": 0, "mismatches": [], "error": None}

    async def body(source: Store, target: Store) -> None:
        next_chunk = await _read_pairs(source, target, items)
        while pairs := await next_chunk():
            for path, _, _, j in judged(pairs, rules, out):
                if j.verdict is not Verdict.EQUAL:
                    out["mismatches"].append((path, j.kind, j.detail))

    try:
        await _with_stores(source_url, target_url, body)
    except MetadataStoreError as e:
        out["error"] = _error(e)
    return out
