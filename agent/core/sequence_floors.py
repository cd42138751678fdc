"""Sequential names under the counters a migration retired, for the agent's ZooKeeper front and
gRPC gateway.

A migration carries BookKeeper's ledger-id generator by a jump and leaves a floor for each counter
it retires (``metashift.stores.sequence_floors``). A client that read the generator before the
switch may still create sequential nodes under a retired counter (BookKeeper keeps whether
``idgen-long`` exists and its ``HOB-`` list for as long as it runs; Pulsar's store caches
``exists`` and children for minutes). Under a parent with a floor the agent names the node after
the floor's next id, taken by a compare-and-set, so those ids are above every id the source
handed out too.

The same floors keep ZooKeeper's lock queues in order across a migration: a client's ephemeral
with a sequential name (a kazoo or Curator lock node, ``..._lock__0000000042``) is re-created in
the target under its own name, and the target's own counter for that parent knows nothing of it
(ZooKeeper counts the creations it saw; Oxia and etcd count the parent's writes), so a newcomer's
lock node could sort before the holder's and take the lock it holds. In its freeze, once it re-created them
and before it acknowledges PREPARATION, each agent raises a floor under every parent of such an
ephemeral it carried whose own counter in the target is still at or below the name's number
(``floor_carried_sequentials``): one write per parent, and later sequential names there come from
the floor. Every floor is then in place before the COMPLETED write, so no agent that switches
early reads the target's floors before another agent raised its own (a newcomer routed by the
first agent to switch would otherwise be named by the target's own counter). Not under a parent
whose counter the copy carries (the coordinator's ``counters`` and ledgers roots: a ledger-id
generator's, Pulsar's producer-name counter, whose broker holds an ephemeral child all along):
its counter is carried in the freeze, above every name of the source, and a floor beside it
would hand out the numbers its own counter hands out to clients on the store directly. At the
switch, once the counters are carried, each agent looks again (an agent that started after the
freeze raises its floors only then).

Which parents have a floor is read once per store and kept: a store gains floors only as a
migration's target, before any agent routes to it (the cache of a store is dropped when the
router switches to it, all the same).
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Callable, Iterable

from metashift.agent.core.router import Router
from metashift.stores import BulkStore, MetadataStore, PutOp, paths
from metashift.stores.sequence_floors import floored_parents, raise_floor, take_from_floor

#: A ZooKeeper sequential name: ten digits at the end (``%010d``, what ZooKeeper's recipes parse).
_SEQUENTIAL_SUFFIX = re.compile(r"([0-9]{10})$")


async def floor_carried_sequentials(
    store: MetadataStore, carried: Iterable[str], *, skip: Callable[[str], bool] | None = None
) -> int:
    """Raise, in ``store``, the floor of every parent of a ``carried`` path with a sequential name
    above that name's number, where the store's own counter there is not above it already, so
    that the next sequential name there sorts after it (the module doc); none under a parent
    ``skip`` names. Returns the number of writes."""
    above: dict[str, int] = {}
    for path in carried:
        m = _SEQUENTIAL_SUFFIX.search(path.rsplit(paths.SEPARATOR, 1)[1])
        parent = paths.parent(path)
        if m and parent is not None and not (skip is not None and skip(parent)):
            above[parent] = max(above.get(parent, 0), int(m.group(1)) + 1)
    writes = 0
    for parent, next_id in sorted(above.items()):
        if isinstance(store, BulkStore) and await store.sequence_counter(parent) >= next_id:
            continue  # its own counter names children above them (a counter the copy carried)
        writes += await raise_floor(store, parent, next_id)
    return writes


class SequenceFloors:
    """The floors of one agent's stores (see the module doc)."""

    def __init__(self, router: Router) -> None:
        self._parents: weakref.WeakKeyDictionary[MetadataStore, asyncio.Future[set[str]]] = (
            weakref.WeakKeyDictionary()
        )
        router.on_switch(self._switched)

    def _switched(self, old: MetadataStore, new: MetadataStore) -> None:
        self._parents.pop(new, None)

    def _reading(self, store: MetadataStore) -> asyncio.Future[set[str]]:
        """The read of ``store``'s floored parents, started once and kept (dropped if it fails)."""
        known = self._parents.get(store)
        if known is None:
            known = asyncio.ensure_future(floored_parents(store))
            self._parents[store] = known

            def forget(done: asyncio.Future[set[str]]) -> None:
                if done.cancelled() or done.exception() is not None:  # read again next time
                    if self._parents.get(store) is done:
                        del self._parents[store]

            known.add_done_callback(forget)
        return known

    async def _floored(self, store: MetadataStore) -> set[str]:
        return await asyncio.shield(self._reading(store))

    def known_free(self, store: MetadataStore, parent: str) -> bool:
        """Whether ``parent`` is known to have no floor in ``store``, without waiting (False while
        the floors are still being read), so that ZooKeeper may name a sequential node there."""
        known = self._reading(store)
        return known.done() and not known.cancelled() and known.exception() is None and parent not in known.result()

    async def take(self, store: MetadataStore, parent: str) -> int | None:
        """The next id of ``parent``'s floor in ``store``, taken; ``None`` when it has none."""
        if parent not in await self._floored(store):
            return None
        return await take_from_floor(store, parent)

    async def named(self, store: MetadataStore, op: PutOp) -> PutOp:
        """``op`` itself, or for a sequential put under a parent with a floor, the create of the
        name the floor gives (with ``store``'s own suffix: ten digits on ZooKeeper, plain on
        etcd, as Pulsar names them)."""
        if not op.sequential:
            return op
        taken = await self.take(store, paths.parent(op.path) or paths.SEPARATOR)
        if taken is None:
            return op
        suffix = f"{taken:010d}" if store.zookeeper_sequential_names else str(taken)
        return PutOp(op.path + suffix, op.value, -1, op.ephemeral, False)
