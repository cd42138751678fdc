"""How the target stands against the source after a migration: ``metashift verify`` run on it,
summed up, and the writes that got into the source while the migration refused or held them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from metashift.copy.rules import default_excluded
from metashift.stores import open_store, paths
from metashift_lab.cli_runner import run_cli

from .cluster import PulsarCluster
from .scenario import MIGRATION_S

#: Paths, errors and such shown per kind (the JSON keeps counts).
SHOWN = 3


async def source_writes(cluster: PulsarCluster, since: float) -> dict[str, Any]:
    """The source's persistent nodes last written at ``since`` or later (ZooKeeper's own mtime; the
    subtrees ``metashift verify`` leaves out aside), each looked up in the target: ``carried`` (the
    same version and value there), ``later`` (the target holds a later version: written there
    since), else ``lost`` (behind, different, or absent). Read at COMPLETED: writes that got
    into the source while the migration refused or held them."""
    excluded = default_excluded()
    source = await open_store(cluster.source_url, watch=False, create_root=False)
    target = await open_store(cluster.target_url, watch=False, create_root=False)
    found: dict[str, list[str]] = {"carried": [], "later": [], "lost": []}
    try:
        pending = ["/"]
        while pending:
            path = pending.pop()
            pending += [p for k in await source.get_children(path) if not _below(p := paths.join(path, k), excluded)]
            got = await source.get(path) if path != "/" else None
            if got is None or got[1].ephemeral or got[1].modification_timestamp < since * 1000:
                continue
            there = await target.get(path)
            if there is not None and there[1].version == got[1].version and there[0] == got[0]:
                found["carried"].append(path)
            elif there is not None and there[1].version > got[1].version:
                found["later"].append(path)
            else:
                found["lost"].append(f"{path} (v{got[1].version}; target "
                                     + ("none" if there is None else f"v{there[1].version}") + ")")
    finally:
        await source.close()
        await target.close()
    return {kind: sorted(found[kind]) for kind in found}


def _below(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


async def verify(cluster: PulsarCluster, say: Callable[[str], None] = print) -> dict[str, Any]:
    """``metashift verify --source zk://... --target oxia://... --json`` (the cluster's traffic
    stopped, its brokers still up), summed up: the target moved on since the switch (nodes ahead or
    only there) apart from what it lacks or holds behind the source (``differs``: lost by the copy
    or since), and every counter whose next id is not above the source's."""
    code, out, err = await run_cli("verify", "--source", cluster.source_url, "--target", cluster.target_url,
                                   "--json", within=MIGRATION_S)  # fmt: skip
    try:
        report = json.loads(out)
    except ValueError:
        return {"ok": False, "error": f"exit {code}: {err.strip()[-500:]}"}
    found = summarize_verify(report)
    say(f"metashift verify: {found['nodes']} nodes, {found['mismatches']} mismatches ({found['by_kind']}); "
        f"counters below the source: {found['counters_below']}")  # fmt: skip
    return found


def summarize_verify(report: dict[str, Any]) -> dict[str, Any]:
    """A ``metashift verify --json`` report in a few figures (``verify``'s doc)."""
    mismatches = list(report.get("mismatches") or [])
    moved_on = [m for m in mismatches if m["kind"] == "extra" or "is ahead of" in m["detail"]]
    differs = [m for m in mismatches if m not in moved_on]
    checks = dict(report.get("counter_checks") or {})
    return {
        "ok": bool(report.get("ok")), "nodes": int(report.get("nodes") or 0), "mismatches": len(mismatches),
        "by_kind": dict(Counter(m["kind"] for m in mismatches)), "moved_on": len(moved_on), "differs": len(differs),
        "differs_first": [f"{m['path']}: {m['kind']}: {m['detail']}" for m in differs[:SHOWN]],
        "counters_below": {p: {"source_next": c["source"], "target_next": c["target"]}
                           for p, c in checks.items() if not c["ok"]},
        "counters": len(checks),
    }  # fmt: skip
