"""Who is registered in a store, and through whom: the live ephemerals of a cluster's members
(brokers, bookies, any other client) grouped by the store session that holds them, each session
an agent's or not.

A member that reaches the store directly, not through its node's agent, would be split off by a
migration: the agents move the cluster to the target and it goes on writing into the source. Its
ephemerals give it away: an ephemeral lives on the session that created it (ZooKeeper's
ephemeralOwner, etcd's lease, Oxia's session), and an agent creates its clients' ephemerals on its
own store session, the one its participant record lives on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from metashift.stores import BulkStore, MetadataStore

from . import paths
from .participants import ParticipantRecord

#: Where Pulsar's brokers register (every load manager of the 4.x lines: ``ModularLoadManager``
#: and the extensible one's ``BrokerRegistry``).
BROKERS = "/loadbalance/brokers"
#: Below a BookKeeper ledgers root (``/ledgers`` by default; any root is recognised by the shape).
AVAILABLE = "available"
READ_ONLY = "readonly"

KINDS = ("broker", "bookie", "read-only bookie", "client")


def session_name(owner: int) -> str:
    """A store session as ZooKeeper's tools print it (etcd's and Oxia's ids alike): ``0x1000a3b``."""
    return f"0x{owner:x}"


def registration(path: str) -> tuple[str, str] | None:
    """(kind, name) when ``path`` is where a broker or bookie registers, else ``None``."""
    parent, _, name = path.rpartition("/")
    if not name:
        return None
    if parent == BROKERS:
        return "broker", name
    grand, _, last = parent.rpartition("/")
    if last == AVAILABLE and grand:
        return "bookie", name
    if last == READ_ONLY and grand.rpartition("/")[2] == AVAILABLE:
        return "read-only bookie", name
    return None


@dataclass
class Holder:
    """One store session and the live ephemerals it holds."""

    owner: int
    agent: str | None
    """The node id of the agent whose session it is; ``None``: a session no agent holds."""
    paths: list[str] = field(default_factory=list)
    members: list[tuple[str, str, str]] = field(default_factory=list)
    """(kind, name, path) of each broker or bookie registration among ``paths``."""

    @property
    def session(self) -> str:
        return session_name(self.owner)

    def problem(self) -> str:
        """What an operator reads about a session that bypasses the agents, and what to do."""
        where = f"(session {self.session}"
        if self.members:
            kind, name, path = self.members[0]
            more = len(self.paths) - 1
            where += f", {path}" + (f" and {more} other ephemeral(s)" if more else "") + ")"
            return (f"{kind} {name} is registered through a session no agent holds: restart it onto its agent's "
                    f"ZooKeeper front first {where}")
        shown = ", ".join(sorted(self.paths)[:3]) + (f" and {len(self.paths) - 3} more" if len(self.paths) > 3 else "")
        return (f"{shown} {'is an ephemeral' if len(self.paths) == 1 else 'are ephemerals'} of a session no agent "
                f"holds: a client that reaches the store directly; restart it onto its agent, or stop it, first "
                f"{where})")


@dataclass
class Census:
    """Every live ephemeral of a store, by the session holding it."""

    holders: dict[int, Holder] = field(default_factory=dict)
    agents: dict[int, str] = field(default_factory=dict)
    """Agent sessions: owner -> node id (from the participant records' own ephemerals)."""

    def add(self, path: str, owner: int) -> None:
        holder = self.holders.get(owner)
        if holder is None:
            holder = self.holders[owner] = Holder(owner, self.agents.get(owner))
        holder.paths.append(path)
        found = registration(path)
        if found is not None:
            holder.members.append((found[0], found[1], path))

    @property
    def bypassing(self) -> list[Holder]:
        """Sessions no agent holds, members first, in a stable order."""
        out = [h for h in self.holders.values() if h.agent is None]
        return sorted(out, key=lambda h: (not h.members, sorted(h.paths)[:1]))

    def members(self) -> list[dict[str, object]]:
        """Every broker and bookie registration: ``kind``, ``name``, ``path``, ``session``, ``agent``."""
        out: list[dict[str, object]] = []
        for holder in self.holders.values():
            for kind, name, path in holder.members:
                out.append({"kind": kind, "name": name, "path": path, "session": holder.session,
                            "agent": holder.agent})
        return sorted(out, key=lambda m: (KINDS.index(str(m["kind"])), str(m["name"])))

    def ephemerals(self, *, by_agents: bool) -> int:
        return sum(len(h.paths) for h in self.holders.values() if (h.agent is not None) == by_agents)


def agent_sessions(records: Iterable[ParticipantRecord]) -> dict[int, str]:
    """owner -> node id of every agent's session, read off its participant record."""
    return {r.owner: r.node_id for r in records if r.owner}


async def census(store: MetadataStore, records: Iterable[ParticipantRecord]) -> Census:
    """Walk ``store`` for every live ephemeral (the preflight requests of ``migrate check`` aside:
    those are the checking command's own) and sort them by the session holding them."""
    if not isinstance(store, BulkStore):
        raise TypeError(f"{store.url} is not a store opened directly: its ephemerals' owners cannot be read")
    found = Census(agents=agent_sessions(records))
    async for page in store.walk("/", prune=(paths.PREFLIGHT,)):
        for node in page:
            if node.ephemeral:
                found.add(node.path, node.owner)
    return found

