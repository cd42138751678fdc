"""``Stat``: what a store knows about a node besides its value."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    """What a store knows about a node besides its value."""

    path: str
    """The real path; for a sequential put, with the store's suffix."""
    version: int
    """0 after create, +1 per put (ZooKeeper dataVersion; etcd version - 1)."""
    creation_timestamp: int = 0
    """Milliseconds since the epoch; 0 where the store does not keep it (etcd)."""
    modification_timestamp: int = 0
    ephemeral: bool = False
    created_by_self: bool = False
    """True when this store object's own session owns the (ephemeral) node."""
    owner: int = 0
    """The id of the store session an ephemeral lives on (ZooKeeper's ephemeralOwner, etcd's
    lease, Oxia's session id); 0 for a persistent node, or where it is not known (the agent's
    gRPC API does not carry it). Tells apart who registered what (``migrate check``)."""
