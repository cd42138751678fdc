"""``migrate status``: where the migration stands, read from one store (the source, or any store
a cluster lived on).

Read from a store the cluster left (``lives_on``), it says where the agents are now and how many
(``agents_now``, read there) and what was written in this store since the switch
(``writes_after_switch``: what the coordinator following that store keeps there, one read; a
walk of the whole store only when asked: ``after_switch``); read from the store the cluster
arrived in, it says the cluster lives there (``lives_here``, with the ``origin``: from which
store, in which epoch). The copy's lines of a migration that completed describe the whole of it
(``copy.summary``: the full passes, the delta rounds, the final check), not only its last step.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from metashift.migration import paths
from metashift.migration.flag import MigrationFlag
from metashift.migration.origin import StoreState, read_state
from metashift.migration.participants import list_participants
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, MetadataStoreError, open_store, parse_url

from .after_switch import AfterSwitch, kept_writes, writes_after
from .election import read_leader
from .progress import migration_text


@dataclass
class Status:
    """What ``migrate status`` shows; ``to_dict`` is its JSON."""

    flag: MigrationFlag | None
    participants: list[dict[str, Any]]
    copy: dict[str, Any] | None
    leader: str | None
    state: StoreState | None = None
    after_switch: AfterSwitch | None = None
    """Read from a store the cluster left: what was written there since the switch."""
    agents_now: dict[str, Any] | None = None
    """Read from a store the cluster left: the agents registered where it lives now."""

    def to_dict(self) -> dict[str, Any]:
        flag = self.flag
        state = self.state or StoreState(flag, None)
        origin = state.origin
        return {
            "phase": flag.phase.value if flag else Phase.NOT_STARTED.value,
            "target": flag.target_url if flag else None,
            "epoch": flag.epoch if flag else state.arrived_epoch,
            "reason": flag.reason if flag else None,
            "coordinator": (flag.coordinator if flag and flag.coordinator else self.leader),
            "participants": self.participants,
            "dropped": list(flag.dropped) if flag else [],
            "copy": self.copy,
            "elapsed_s": round(flag.elapsed_s, 3) if flag else 0.0,
            "target_cleaned": flag.target_cleaned if flag else False,
            "released": flag.released if flag else True,
            "lives_on": state.left_for,
            "origin": {"epoch": origin.epoch, "source": origin.source_url} if origin else None,
            "forced": flag.forced.to_dict() if flag and flag.forced else None,
            "writes_after_switch": self.after_switch.to_dict() if self.after_switch else None,
            "agents_now": self.agents_now,
            "lives_here": state.left_for is None and flag is None and origin is not None,
        }


async def status(source: MetadataStore, *, after_switch: bool = False, scan: bool = False) -> Status:
    """Where the migration stands, read from ``source``: a few reads, whatever the tree's size.
    ``after_switch``: read from a store the cluster left, also what was written there since the
    switch, as its follower keeps it (``after_switch``; ``scan``: by a walk of the whole store
    instead), and where the agents are now (the store it went to)."""
    state = await read_state(source)
    flag = state.current_flag
    epoch = flag.epoch if flag else 0
    now = int(time.time() * 1000)
    participants = []
    for p in await list_participants(source):
        age = p.heartbeat_age(now)
        participants.append({
            "node_id": p.node_id, "role": p.role, "address": p.address,
            "acknowledged": flag is not None and p.acknowledged == epoch, "path": p.path,
            "heartbeat_age_s": round(age, 1) if age is not None else None,
            "alive": age is None or p.timeout is None or age <= p.timeout,
        })
    copy = None
    got = await source.get(paths.PROGRESS)
    if got is not None and flag is not None:
        try:
            body = json.loads(got[0])
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("epoch") == epoch:
            copy = {k: body.get(k) for k in ("stage", "done", "total", "verified", "passes", "pending", "counters",
                                          "counters_total", "timings")}
            timings: list[dict[str, Any]] = copy["timings"] or []
            copy["timings"] = timings
            if not copy.get("total"):
                copy["total"] = None  # a pass that had not counted its nodes (or never will: it was stopped)
            copy["stopped"] = flag.phase is Phase.FAILED and not copy.get("verified")
            if flag.phase is Phase.COMPLETED:
                copy["summary"] = migration_text(timings)
                full = [t for t in timings if t.get("kind") == "full"]
                if full and not copy.get("total"):  # the whole tree was copied: say how much
                    copy["done"] = copy["total"] = full[-1].get("nodes")
    leader = await read_leader(source)
    written = agents_now = None
    if after_switch and state.left_for is not None and flag is not None:
        if flag.switch_position is not None:
            if scan:
                written = await writes_after(source, flag.switch_position)
            else:
                written = await kept_writes(source, flag.epoch, flag.switch_position)
        agents_now = await _agents_in(state.left_for)
    return Status(flag, participants, copy, leader, state, written, agents_now)


async def _agents_in(url: str) -> dict[str, Any]:
    """The agents registered in the store ``url`` (a flag's target: no credentials, so a store that
    needs them may not be read: said so)."""
    try:
        async with await open_store(parse_url(url), watch=False, create_root=False) as store:
            records = await list_participants(store)
    except MetadataStoreError as e:
        return {"store": url, "count": None, "node_ids": [], "error": str(e)}
    return {"store": url, "count": len(records), "node_ids": sorted(r.node_id for r in records)}
