"""What a store received after the cluster left it: nodes written outside the migration's own
subtree since the switch (the COMPLETED write, whose position the released flag records).

After COMPLETED the cluster lives in the target; a member still writing into the old store (one
restarted onto it by hand, one that never went through its agent) is acknowledged there and never
seen by the cluster. No store fences that cheaply (docs/design.md, "A member that bypasses the
agents"), so ``migrate status`` read from the old store names what arrived there since: the nodes
created or changed after the switch, by their write position (ZooKeeper's mzxid, etcd's
mod_revision, Oxia's modification time). Deletions are not seen this way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metashift.migration import paths
from metashift.stores import BulkStore, MetadataStore

#: Paths named in the report, at most.
SHOWN = 20


@dataclass
class AfterSwitch:
    """Nodes of the old store written after the switch."""

    position: int
    count: int = 0
    paths: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "count": self.count, "paths": self.paths}

    def text(self) -> str:
        if not self.count:
            return "none (nothing outside the migration's nodes was written here since the switch)"
        shown = ", ".join(self.paths) + (f" and {self.count - len(self.paths)} more" if self.count > len(self.paths)
                                         else "")
        return (f"{self.count} node(s) written in this store after the cluster left it, not seen by the cluster "
                f"(a member still writes here, bypassing the agents: restart it onto its agent or the new "
                f"store): {shown}")


async def writes_after(store: MetadataStore, position: int) -> AfterSwitch | None:
    """The nodes of ``store`` written after ``position`` (``None`` for a store that cannot be walked)."""
    if not isinstance(store, BulkStore):
        return None
    found = AfterSwitch(position)
    async for page in store.walk("/", prune=(paths.ROOT,)):
        for node in page:
            if node.position > position:
                found.count += 1
                if len(found.paths) < SHOWN:
                    found.paths.append(node.path)
    found.paths.sort()
    return found
