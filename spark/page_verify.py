"""The verification of two streams of pages, a source's and a target's, in a Spark task or the
driver: every persistent node judged as the copy judges it, the counters checked, what only the
target has reported."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator
from typing import Any

from metashift.copy import counters
from metashift.copy.rules import Judgement, Rules, Side, Verdict, judge
from metashift.stores import (
    NodeRead,
    Store,
    paths,
)

from .page_copy import read_levels, side_of


def new_verify_result() -> dict[str, Any]:
    return {"nodes": 0, "bytes": 0, "vanished": 0, "ephemerals": 0, "counters": 0, "mismatches": [], "error": None,
            "listed": 0, "counter_checks": {}}  # fmt: skip


async def verify_pages(
    source: Store,
    target: Store,
    source_pages: AsyncIterator[list[NodeRead]],
    target_pages: AsyncIterator[list[NodeRead]],
    rules: Rules,
    out: dict[str, Any],
    parents_ok: set[str] | None = None,
) -> None:
    """Compare the nodes of both sides: every persistent source node judged against its target
    node (``rules.judge``, the copy's own), the counters, and the persistent target nodes the
    source does not have ("extra"), except the parents of source nodes that the target needs
    and the source does not (etcd keeps no parents; ZooKeeper must), the empty parents a
    ZooKeeper target made for ephemerals re-created in it (a migration's) or for the excluded
    subtrees (the floors of retired counters), the empty nodes a ledger-id generator's jump
    made, and ``parents_ok``."""
    src: dict[str, NodeRead] = {}
    seen: set[str] = set()
    ephemeral_ancestors: set[str] = set()
    async for page in source_pages:
        out["listed"] += len(page)
        for node in page:
            if rules.is_excluded(node.path):
                continue
            seen.add(node.path)
            if node.ephemeral:
                out["ephemerals"] += 1
                ephemeral_ancestors.update(paths.ancestors(node.path))
            else:
                src[node.path] = node
    tgt: dict[str, NodeRead] = {}
    async for page in target_pages:
        for node in page:
            if not rules.is_excluded(node.path):
                tgt[node.path] = node
    checked: set[str] = set()
    for path, node in src.items():
        out["nodes"] += 1
        out["bytes"] += len(node.value)
        counter = rules.is_counter(path)
        keep = rules.keeps_version(path)
        j: Judgement = judge(Side(node.value, node.version), side_of(tgt.get(path)), counter=counter, keep_version=keep)
        if j.verdict is not Verdict.EQUAL:
            out["mismatches"].append((path, j.kind, j.detail))
        if counter:
            out["counters"] += 1
            if path not in checked:  # (a generator's checks come again at each of its nodes: the same)
                checked.add(path)
                for at, state in (await counters.check(source, target, path, rules)).items():
                    out["counter_checks"][at] = state.to_dict()
                    if not state.ok:
                        out["mismatches"].append(counters.mismatch(at, state))
    source_paths = sorted(src)
    for path, node in tgt.items():
        if path in src or node.ephemeral or (parents_ok is not None and path in parents_ok and path not in seen):
            continue
        below = path + paths.SEPARATOR
        i = bisect.bisect_left(source_paths, below)
        if i < len(source_paths) and source_paths[i].startswith(below):
            continue
        if not node.value and node.version == 0 and (path in ephemeral_ancestors or rules.is_excluded_ancestor(path)):
            continue
        if not node.value and rules.ledger_root_of(path) is not None and path not in seen:
            continue  # made by the ledger-id generator's jump (a HOB- node and its parent)
        out["mismatches"].append(
            (path, "extra", f"only in the target (version {node.version}, {len(node.value)} bytes)")
        )


async def verify_top(
    source: Store, target: Store, levels: list[list[str]], source_children: dict[str, list[str]], rules: Rules
) -> dict:
    """Verify the top of the tree (the driver's part): its nodes, and every target node below it
    that the source has no name for (listed whole: each is an extra)."""
    out = new_verify_result()
    top = [paths.SEPARATOR] + [p for level in levels for p in level]
    named = {c for kids in source_children.values() for c in kids} | set(top)
    target_kids = await _children(target, top, rules)
    extra_roots = sorted(c for p in top for c in target_kids[p] if c not in named)

    async def target_pages() -> AsyncIterator[list[NodeRead]]:
        async for page in read_levels(target, levels):
            yield page
        if extra_roots:
            async for page in target.read_trees(extra_roots, prune=rules.excluded):
                yield page

    # a top path the target has and the source only names (an etcd parent with no key) is a parent
    await verify_pages(source, target, read_levels(source, levels), target_pages(), rules, out, parents_ok=named)
    return out


async def _children(store: Store, level: list[str], rules: Rules) -> dict[str, list[str]]:
    from .plan import children_of

    return await children_of(store, level, rules)
