"""Which ``Backend`` serves the front: the one of the router's active store, chosen when the front
starts and again at every switch of the router (a migration's COMPLETED moves it to the target,
FAILED back to the source), never per request."""

from __future__ import annotations

from collections.abc import Callable

from metashift.agent.core.router import Router
from metashift.agent.zookeeper.backend import Backend, StoreBackend
from metashift.stores import MetadataStore
from metashift.stores.zookeeper import ZooKeeperStore

#: Makes the pass-through backend of a ZooKeeper store (``passthrough.PassThroughBackend``).
PassThroughFactory = Callable[[ZooKeeperStore], Backend]


class ActiveBackend:
    """The backend of the router's active store, swapped with it (the module's doc)."""

    def __init__(self, router: Router, pass_through: PassThroughFactory) -> None:
        self._pass_through = pass_through
        self.current: Backend = self._choose(router.active)
        # a listener of the router: the switch and the swap happen in one step, so no request is
        # ever offered to the backend of a store the router has left
        router.on_switch(self._switched)

    def _choose(self, store: MetadataStore) -> Backend:
        # the one place the kind of store is looked at: a ZooKeeper store speaks the clients'
        # protocol, so what it answers as it is passes through; any other is served by the handlers
        if isinstance(store, ZooKeeperStore):
            return self._pass_through(store)
        return StoreBackend(store)

    def _switched(self, old: MetadataStore, new: MetadataStore) -> None:
        self.current = self._choose(new)
