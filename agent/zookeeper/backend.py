"""The store behind the front, one implementation per kind of store (zetcd's ``ZK`` interface is
the model: a pass-through implementation and an etcd one behind one interface).

Every request a connection reads is first offered to the active store's ``Backend`` in its wire
form (``pass_through``); the ones it declines take the ordinary path (``handlers``), which serves
every kind of store through the ``MetadataStore`` API. The implementations:

- ``passthrough.PassThroughBackend``: a ZooKeeper store; the requests ZooKeeper answers as they
  are go to it as they came (``ZooKeeperStore.forward``);
- ``StoreBackend``: any other store (etcd, Oxia): nothing passes through.

Which one serves is chosen once per store, when the router starts on it or switches to it
(``backends.ActiveBackend``), never per request. The ordinary path is not a backend's: a write
it holds while a migration freezes writes is released on whichever store the router points at
then (``WriteGate.run``), not on the store that was active when it arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from metashift.agent.zookeeper.session import ZkSession
from metashift.stores import MetadataStore

#: Takes the framed reply to a request passed through (from the store's read loop: no task).
Answer = Callable[[bytes], None]


class Backend(Protocol):
    """What a connection's read loop asks of the active store, whatever its kind."""

    @property
    def store(self) -> MetadataStore:
        """The store this backend serves (the router's active one while it is chosen)."""
        ...

    def pass_through(self, session: ZkSession, xid: int, op: int, data: bytes, answer: Answer) -> bool:
        """Serve one request packet (``data``, header included) as the store's own wire request;
        ``answer`` gets the framed reply. False: declined, nothing done (the caller serves it on
        the ordinary path, and every later request of the connection until it is answered)."""
        ...

    def flush(self) -> None:
        """Send what was passed through so far now: the caller has no more for now."""
        ...


class StoreBackend:
    """A store served through the ``MetadataStore`` API only (etcd, Oxia): every request takes
    the ordinary path (``handlers``)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    @property
    def store(self) -> MetadataStore:
        """The store every request is served from."""
        return self._store

    def pass_through(self, session: ZkSession, xid: int, op: int, data: bytes, answer: Answer) -> bool:
        """Declined: the ordinary path serves it."""
        return False  # the store does not speak ZooKeeper's protocol: nothing to pass through

    def flush(self) -> None:
        """Nothing is ever sent ahead of the ordinary path."""
