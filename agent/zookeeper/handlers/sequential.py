"""A create's new node, and the names of sequential ones.

Sequential names are ZooKeeper's (ten digits): on a ZooKeeper store they are ZooKeeper's own; on
etcd the counter is the parent key's version (Pulsar's layout, bumped by a compare-and-set that
keeps the parent's value), raised above every existing child's number so a lock queue never goes
backwards after a migration. Under a counter that a migration retired (a ledger-id generator's
old counters, ``metashift.agent.core.sequence_floors``), on either store, the number is taken from
the counter's floor instead: a client that still uses it gets ids above the source's."""

from __future__ import annotations

from metashift.agent.core.sequence_floors import SequenceFloors
from metashift.agent.zookeeper.handlers.base import MAX_ATTEMPTS, ZkError, parent_of
from metashift.stores import MetadataStore, Stat
from metashift.stores.errors import AlreadyExists, BadVersion
from metashift.stores.zookeeper.wire import Err


class SequentialNames:
    """Puts a create's new node in a store, naming a sequential one (the module's doc)."""

    def __init__(self, floors: SequenceFloors) -> None:
        self.floors = floors

    async def put_new(self, store: MetadataStore, path: str, data: bytes, ephemeral: bool, sequential: bool) -> Stat:
        """Create ``path`` (``path`` and its number when ``sequential``) in ``store``: its Stat."""
        if not sequential:
            return await store.put(path, data, -1, ephemeral=ephemeral)
        parent = parent_of(path)
        for _ in range(MAX_ATTEMPTS):
            taken = await self.floors.take(store, parent)
            if taken is None:
                break
            try:
                return await store.put(f"{path}{taken:010d}", data, -1, ephemeral=ephemeral)
            except AlreadyExists:
                continue
        else:
            raise ZkError(Err.SYSTEMERROR, f"no free sequential name under {parent}")
        if store.zookeeper_sequential_names:  # ZooKeeper's own sequential names
            return await store.put(path, data, -1, ephemeral=ephemeral, sequential=True)
        for _ in range(MAX_ATTEMPTS):
            try:
                counter = await store.next_sequence(parent)
            except BadVersion:
                raise ZkError(Err.SYSTEMERROR, f"the sequence counter of {parent} kept moving") from None
            name = f"{path}{counter:010d}"
            try:
                return await store.put(name, data, -1, ephemeral=ephemeral)
            except AlreadyExists:
                continue
        raise ZkError(Err.SYSTEMERROR, f"no free sequential name under {parent}")
