"""Leader election among agents: whoever holds the ``leader`` node coordinates.

The leader node is an ephemeral of the leader's store session, and the leader rewrites it every
quarter of its ``timeout`` (``coordinator.participant_timeout``): a heartbeat. A candidate that
sees it unchanged for that long (by its own clock, ``migration.liveness``) deletes it (a
compare-and-set on the version it saw) and takes its place: a dead coordinator is replaced in
seconds, not after its store session times out. A leader whose node was taken over finds out at
its next heartbeat or ``holds`` check; every phase move is a compare-and-set on the flag, which
the new leader rewrites first, so a deposed leader can never move a phase. Its writes into the
target are fenced by a lease (``fresh``): a leader paused past it (SIGSTOP, a stalled host) does
not write on when it resumes, where the new leader (and, after the switch, the clients) write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from metashift.migration import paths
from metashift.migration.liveness import BEATS_PER_TIMEOUT, LEASE_SHARE, Liveness
from metashift.stores import BadVersion, MetadataStore, MetadataStoreError, NotFound, Notification
from metashift.stores.aio import wait_event

log = logging.getLogger(__name__)

#: Longest pause between two looks at the leader node when no notification came.
POLL_SECONDS = 1.0


class LeaderElection:
    """One candidate: ``campaign`` returns once this agent holds the leader node."""

    def __init__(self, store: MetadataStore, node_id: str, timeout: float) -> None:
        self.store = store
        self.node_id = node_id
        self.timeout = timeout
        self._beats = 0
        self._version = -1
        self._liveness = Liveness()
        self.lease_until = 0.0
        """Monotonic time until which this agent may write as the leader: ``LEASE_SHARE`` of the
        timeout after it sent the last write of the leader node that succeeded. Candidates take
        over only once the node went unchanged for the whole timeout by their own clocks, so a
        leader paused (SIGSTOP) or cut off past its lease finds it out before writing again."""

    def fresh(self) -> bool:
        """This agent may still write as the leader (its lease on the leader node holds)."""
        return time.monotonic() <= self.lease_until

    def _renewed(self, sent: float) -> None:
        self.lease_until = max(self.lease_until, sent + self.timeout * LEASE_SHARE)

    def _body(self) -> bytes:
        return json.dumps({"nodeId": self.node_id, "heartbeat": self._beats, "timeout": self.timeout}).encode()

    async def campaign(self) -> None:
        changed = asyncio.Event()

        def on_change(n: Notification) -> None:
            if n.path == paths.LEADER:
                changed.set()

        remove = self.store.add_listener(on_change, under=paths.ROOT)
        try:
            while True:
                changed.clear()
                try:
                    if await self._try_take():
                        log.info("elected coordinator (%s)", self.node_id)
                        return
                except MetadataStoreError as e:
                    log.warning("election: %s", e)
                await wait_event(changed, min(POLL_SECONDS, self.timeout / BEATS_PER_TIMEOUT))
        finally:
            remove()

    async def _try_take(self) -> bool:
        self._beats = 0
        self.lease_until = 0.0
        sent = time.monotonic()
        try:
            stat = await self.store.put(paths.LEADER, self._body(), expected_version=-1, ephemeral=True)
            self._version = stat.version
            self._renewed(sent)
            return True
        except BadVersion:  # someone holds it: perhaps our own session still does
            pass
        got = await self.store.get(paths.LEADER)
        if got is None:
            return False  # gone meanwhile: try again at once next round
        if got[1].ephemeral and got[1].created_by_self:
            self._version = got[1].version
            return await self.beat()  # a write of the node: the lease counts from it
        holder, timeout = _holder(got[0])
        age = self._liveness.observe(paths.LEADER, got[1].version)
        if timeout is not None and age > timeout:
            log.warning("coordinator %s gave no heartbeat for %.1fs (its timeout: %gs): taking over",
                        holder, age, timeout)
            with contextlib.suppress(NotFound, BadVersion):  # another candidate was quicker
                await self.store.delete(paths.LEADER, expected_version=got[1].version)
            self._liveness.forget(paths.LEADER)
        return False

    async def beat(self) -> bool:
        """One heartbeat of the leader node; False when it is no longer ours (taken over)."""
        self._beats += 1
        sent = time.monotonic()
        try:
            stat = await self.store.put(paths.LEADER, self._body(), expected_version=self._version, ephemeral=True)
        except (BadVersion, NotFound):
            return await self.holds()
        self._version = stat.version
        self._renewed(sent)
        return True

    async def holds(self) -> bool:
        """True while this agent's store session owns the leader node."""
        got = await self.store.get(paths.LEADER)
        if got is None or not got[1].ephemeral or not got[1].created_by_self:
            return False
        self._version = got[1].version
        return True

    async def resign(self) -> None:
        with contextlib.suppress(MetadataStoreError):
            got = await self.store.get(paths.LEADER)
            if got is not None and got[1].created_by_self:
                await self.store.delete(paths.LEADER, expected_version=got[1].version)


async def read_leader(store: MetadataStore) -> str | None:
    """The node id of the current leader in ``store``, if any."""
    got = await store.get(paths.LEADER)
    return _holder(got[0])[0] if got is not None else None


def _holder(data: bytes) -> tuple[str | None, float | None]:
    """The node id in a leader node, and its heartbeat timeout (``None``: it does not beat)."""
    try:
        body = json.loads(data)
        node_id = str(body["nodeId"])
    except (ValueError, KeyError, TypeError):
        return None, None
    timeout = body.get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        return node_id, float(timeout)
    return node_id, None
