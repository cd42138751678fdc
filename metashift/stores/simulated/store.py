"""``SimulatedStore``: a client of a ``SimulatedServer`` with one session, implementing the whole
store interface (Pulsar's ``MetadataStore`` and the copy's bulk one) as the real backends do, so
that it passes the same conformance suite. Every call goes through ``_call``: the server's fault
plan first (a delay, a refusal, a lost answer), then the call applied whole at once.

Session events as Pulsar's stores give them: a heartbeat that finds the server unreachable is
ConnectionLost, the next one that gets through Reconnected; one that finds the session expired is
SessionLost, then a new session is taken and SessionReestablished follows. A store whose
notifications are cut (``break_notifications``) hears ConnectionLost then Reconnected, so its
listeners read again, as after a real stream's loss.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

from .. import paths
from ..bulk import NodeInfo, NodeRead, Restore, restore_by_puts
from ..errors import BadVersion, MetadataStoreError, NotEmpty, NotFound, StoreUnavailable
from ..notifications import Notification, SessionEvent
from ..ops import GetResult
from ..stat import Stat
from ..store import Store
from ..urls import StoreURL
from .server import SessionExpired, SimulatedServer
from .tree import Node

T = TypeVar("T")

#: Largest value a simulated store takes (ZooKeeper's default ``jute.maxbuffer`` room).
MAX_VALUE_SIZE = 1024 * 1024


class SimulatedStore(Store):
    """A store on a ``SimulatedServer``, with one session; make one with ``connect``."""

    max_value_size = MAX_VALUE_SIZE
    max_version = 2**31 - 1
    zookeeper_sequential_names = True
    sequence_counter_in_one_write = True

    def __init__(self, url: StoreURL, server: SimulatedServer, *, watch: bool) -> None:
        super().__init__(url)
        self.server = server
        self.name = f"{server.name}#{id(self):x}"
        self.session = 0
        self._watch = watch
        self._unsubscribe: Callable[[], None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._closed = False
        self._disconnected = False
        self._stream_due: dict[int, float] = {}
        self._stream_generation = 0
        """When the last notification queued on each stream is delivered (loop time)."""

    @classmethod
    async def connect(cls, server: SimulatedServer, url: StoreURL, *, watch: bool = True) -> SimulatedStore:
        """Open a session on ``server``; the store sees the tree below ``url.root``, which is made
        when it is missing. ``StoreUnavailable`` when the server is unreachable."""
        store = cls(url, server, watch=watch)
        server.check_reachable(None)
        server.expire_due()
        store.session = server.open_session(url.session_timeout)
        if url.root != paths.SEPARATOR and server.tree.get(url.root) is None:
            server.publish(server.tree.put(url.root, b"", None, 0, False)[2])
        if watch:
            store._unsubscribe = server.subscribe(store._heard)
        store._keepalive = asyncio.get_running_loop().create_task(store._keep_alive(), name=f"keepalive {store.name}")
        return store

    # ---- the one way to the server --------------------------------------------------------------

    async def _call(self, kind: str, path: str, apply: Callable[[], T]) -> T:
        """Run ``apply`` on the server as one step, after the fault plan's say on it."""
        if self._closed:
            raise StoreUnavailable("the simulated store is closed", path)
        fault = self.server.fault_for(self.name, kind, path)
        if fault.delay:
            await asyncio.sleep(fault.delay)
        server = self.server
        refused = StoreUnavailable(f"simulated store {server.name} refused the call", path)
        refused.write_may_have_happened = False
        server.check_reachable(path)
        if fault.refuse:
            raise refused
        server.expire_due()
        server.heard_from(self.session)
        try:
            result = apply()
        except (BadVersion, NotEmpty, NotFound) as e:  # named by the store's path, not the server's
            raise type(e)(path) from None
        if fault.lose_answer:
            raise StoreUnavailable(f"simulated store {server.name}: the answer was lost", path)
        return result

    def _real(self, path: str) -> str:
        root = self.url.root
        if root == paths.SEPARATOR:
            return path
        return root if path == paths.SEPARATOR else root + path

    def _mine(self, real: str) -> str | None:
        """The store's path of the server's ``real`` path; ``None`` outside the root."""
        root = self.url.root
        if root == paths.SEPARATOR:
            return real
        if real == root:
            return paths.SEPARATOR
        return real[len(root):] if real.startswith(root + paths.SEPARATOR) else None

    def _stat(self, path: str, node: Node) -> Stat:
        return self.server.tree.stat(path, node, self.session)

    # ---- MetadataStore --------------------------------------------------------------------------

    async def _get(self, path: str) -> GetResult:
        def get() -> GetResult:
            node = self.server.tree.get(self._real(path))
            return None if node is None else (node.value, self._stat(path, node))

        return await self._call("get", path, get)

    async def _get_children(self, path: str) -> list[str]:
        return await self._call("children", path, lambda: self.server.tree.children(self._real(path)))

    async def _exists(self, path: str) -> bool:
        return await self._call("exists", path, lambda: self.server.tree.get(self._real(path)) is not None)

    async def _put(self, path: str, value: bytes, expected_version: int | None, ephemeral: bool,
                   sequential: bool) -> Stat:  # fmt: skip
        def put() -> Stat:
            owner = self.session if ephemeral else 0
            real, node, notes = self.server.tree.put(self._real(path), value, expected_version, owner, sequential)
            self.server.publish(notes)
            mine = self._mine(real)
            assert mine is not None
            return self._stat(mine, node)

        return await self._call("put", path, put)

    async def _delete(self, path: str, expected_version: int | None) -> None:
        def delete() -> None:
            self.server.publish(self.server.tree.delete(self._real(path), expected_version))

        await self._call("delete", path, delete)

    # ---- notifications --------------------------------------------------------------------------

    def _heard(self, notification: Notification) -> None:
        mine = self._mine(notification.path)
        if mine is None or self._closed:
            return
        # delivered after the write's answer, in write order on its stream; the fault plan may
        # hold a stream back ("notify"), so that streams overtake one another (Oxia's shards)
        loop = asyncio.get_running_loop()
        stream = self.server.stream_of(notification.path)
        delay = self.server.fault_for(self.name, "notify", mine).delay
        due = max(loop.time() + delay, self._stream_due.get(stream, 0.0))
        self._stream_due[stream] = due
        loop.call_at(due, self._deliver, Notification(notification.type, mine), self._stream_generation)

    def _deliver(self, notification: Notification, generation: int) -> None:
        if not self._closed and generation == self._stream_generation:  # else lost with its stream
            self._notify(notification)

    def barrier_paths(self, path: str) -> list[str]:
        """``path``, and for each other notification stream the first of ``path-1``, ``path-2``,
        ... on it (the same names every time)."""
        found, covered = [path], {self.server.stream_of(self._real(path))}
        n = 0
        while len(covered) < self.server.streams and n < 10_000:
            n += 1
            stream = self.server.stream_of(self._real(f"{path}-{n}"))
            if stream not in covered:
                covered.add(stream)
                found.append(f"{path}-{n}")
        return found

    def break_notifications(self) -> None:
        """The notification stream is lost and opened again: what was in flight is gone, and the
        listeners hear ConnectionLost then Reconnected (they read again)."""
        loop = asyncio.get_running_loop()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._stream_generation += 1  # what is queued is lost with the stream (``_deliver``)
        loop.call_soon(self._session_event, SessionEvent.CONNECTION_LOST)

        def again() -> None:
            if not self._closed and self._watch:
                self._unsubscribe = self.server.subscribe(self._heard)
                self._session_event(SessionEvent.RECONNECTED)

        loop.call_soon(again)

    # ---- the session ----------------------------------------------------------------------------

    async def _keep_alive(self) -> None:
        interval = max(self.url.session_timeout / 3, 0.05)
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                self.server.check_reachable(None)
                self.server.expire_due()
                self.server.heard_from(self.session)
            except SessionExpired:
                self._session_event(SessionEvent.SESSION_LOST)
                self.session = self.server.open_session(self.url.session_timeout)
                self._disconnected = False
                self._session_event(SessionEvent.SESSION_REESTABLISHED)
            except StoreUnavailable:
                if not self._disconnected:
                    self._disconnected = True
                    self._session_event(SessionEvent.CONNECTION_LOST)
            else:
                if self._disconnected:
                    self._disconnected = False
                    self._session_event(SessionEvent.RECONNECTED)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
        if self._unsubscribe is not None:
            self._unsubscribe()
        if not self.server.unreachable:  # else the server expires it
            self.server.end_session(self.session)

    # ---- the bulk interface ---------------------------------------------------------------------

    async def _node(self, path: str) -> Node | None:
        return await self._call("get", path, lambda: self.server.tree.get(self._real(path)))

    async def position_of(self, path: str) -> int | None:
        node = await self._node(paths.validate(path))
        return None if node is None else node.position

    async def children_version(self, path: str) -> int | None:
        node = await self._node(paths.validate(path))
        return None if node is None else node.child_creations

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        real = self._real(paths.validate(parent))
        if await self._node(parent) is None:
            await self.put(parent, b"")
        return int(await self._call("put", parent, lambda: self.server.tree.advance_child_creations(real, at_least)))

    async def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        level = [root]
        while level:
            page: list[NodeInfo] = []
            below: list[str] = []
            for path in level:
                for name in await self._get_children(path):
                    kid = paths.join(path, name)
                    if kid in prune:
                        continue
                    node = await self._node(kid)
                    if node is None:
                        continue
                    page.append(NodeInfo(kid, node.version, len(node.value), node.owner != 0, node.owner,
                                         node.position))
                    below.append(kid)
            if page:
                yield page
            level = below

    async def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        level = [r for r in roots if r not in prune]
        while level:
            page: list[NodeRead] = []
            below: list[str] = []
            for path in level:
                node = await self._node(path)
                if node is None:
                    continue
                page.append(NodeRead(path, node.value, node.version, node.owner != 0))
                below += [paths.join(path, name) for name in sorted(node.children)
                          if paths.join(path, name) not in prune]
            if page:
                yield page
            level = below

    async def _restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        return await restore_by_puts(self, items)

    def _check_value(self, path: str, value: bytes) -> None:
        self._check_put(path, value, None)

