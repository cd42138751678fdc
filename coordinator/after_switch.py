"""What a store received after the cluster left it: nodes written outside the migration's own
subtree since the switch (the COMPLETED write, whose position the released flag records).

After COMPLETED the cluster lives in the target; a member still writing into the old store (one
restarted onto it by hand, one that never went through its agent) is acknowledged there and never
seen by the cluster. No store fences that cheaply (docs/design.md, "A member that bypasses the
agents"), so ``migrate status`` read from the old store names what arrived there since: the nodes
created or changed after the switch, by their write position (ZooKeeper's mzxid, etcd's
mod_revision, Oxia's modification time). Deletions are not seen this way.

Finding them takes a look at every node of the old store (ZooKeeper keeps no history to ask, and
Oxia none that lasts), so it is done once and kept, not at every ``status`` (docs/design.md,
"Writes after the switch, kept"):

- ``Follower``: the coordinator elected in the store the cluster lives on follows the store it
  came from (the origin record names it), while no migration from its own store is under way. It
  listens to that store's changes first, walks it once for the nodes written after the switch,
  then keeps the set up to date from the change stream (a node deleted leaves it), and publishes
  the count and the first paths in one node there (``record_path``), an ephemeral of its own
  session: the node exists while someone follows. A break in the stream walks again.
- ``kept_writes``: what ``migrate status`` reads, that one node.
- ``writes_after``: the walk itself, for ``migrate status --scan`` (a store nobody follows any
  more: the agents retired, or the cluster moved on from the store that followed it).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from metashift.migration import paths
from metashift.migration.flag import now_ms
from metashift.migration.origin import read_state
from metashift.migration.phase import Phase
from metashift.stores import (
    BadVersion,
    BulkStore,
    MetadataStore,
    MetadataStoreError,
    NotFound,
    Notification,
    NotificationType,
    SessionEvent,
)

log = logging.getLogger(__name__)

#: Paths named in the report, at most.
SHOWN = 20
#: Paths a follower keeps, at most: past that it counts no more (``at_least``).
KEPT = 100_000
#: How often a follower looks again at whether it should still follow (the store it lives in).
LOOK_SECONDS = 2.0
#: After a failure to reach the old store (or a break in its stream), the pause before trying again.
RETRY_SECONDS = 10.0
#: The record is written at most this often (a busy writer in the old store costs one write a second).
PUBLISH_SECONDS = 1.0
#: During the walk, the record says how far it got at most this often.
PROGRESS_SECONDS = 5.0
#: A growing count of writes in the old store is logged (a warning) at most this often.
TELL_SECONDS = 60.0


def record_path() -> str:
    """The follower's record in the old store (below the migration's root: never a write counted)."""
    return f"{paths.ROOT}/after-switch"


@dataclass
class AfterSwitch:
    """Nodes of the old store written after the switch."""

    position: int
    count: int | None = 0
    """``None``: not known (nobody follows the store now, and no scan was asked)."""
    paths: list[str] = field(default_factory=list)
    at_least: bool = False
    """More were written than a follower keeps: ``count`` is a lower bound."""
    followed_by: str | None = None
    """The coordinator following the store now (its node id)."""
    complete: bool = True
    """False while the follower's first walk runs: ``count`` is what it found so far."""
    scanned: bool = False
    """Walked by this ``status`` itself (``--scan``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "count": self.count, "paths": self.paths, "at_least": self.at_least,
                "followed_by": self.followed_by, "complete": self.complete, "scanned": self.scanned}

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> AfterSwitch:
        return cls(int(body["position"]), body.get("count"), list(body.get("paths") or []),
                   bool(body.get("at_least")), body.get("followed_by"), bool(body.get("complete", True)),
                   bool(body.get("scanned")))

    def text(self) -> str:
        if self.count is None:
            return ("not known: no coordinator follows this store now (the one elected where the cluster lives "
                    "follows it from a few seconds after the switch, while its agent runs); metashift migrate "
                    "status --scan walks it")
        by = f"followed by {self.followed_by}" if self.followed_by else "a walk of this store"
        if not self.complete:
            found = f"{self.count} so far" + (f" ({self._shown()})" if self.count else "")
            return f"{found}: {self.followed_by} is walking this store once, then follows its changes"
        if not self.count:
            return f"none (nothing outside the migration's nodes was written here since the switch; {by})"
        count = f"at least {self.count}" if self.at_least else str(self.count)
        return (f"{count} node(s) written in this store after the cluster left it, not seen by the cluster "
                f"(a member still writes here, bypassing the agents: restart it onto its agent or the new "
                f"store): {self._shown()}; {by}")

    def _shown(self) -> str:
        more = self.count - len(self.paths) if self.count is not None else 0
        return ", ".join(self.paths) + (f" and {more} more" if more > 0 else "")


async def writes_after(store: MetadataStore, position: int) -> AfterSwitch | None:
    """The nodes of ``store`` written after ``position``, by a walk of the whole store (``None``
    for a store that cannot be walked)."""
    if not isinstance(store, BulkStore):
        return None
    found = AfterSwitch(position, scanned=True)
    count = 0
    async for page in store.walk("/", prune=(paths.ROOT,)):
        for node in page:
            if node.position > position:
                count += 1
                if len(found.paths) < SHOWN:
                    found.paths.append(node.path)
    found.count = count
    found.paths.sort()
    return found


async def kept_writes(store: MetadataStore, epoch: int, position: int) -> AfterSwitch:
    """What the follower of ``store`` keeps for the switch at ``position`` of migration ``epoch``:
    one read. Not known (``count`` ``None``) when nobody follows it now."""
    got = await store.get(record_path())
    if got is not None:
        try:
            body = json.loads(got[0])
        except (ValueError, UnicodeDecodeError):
            body = None
        if isinstance(body, dict) and body.get("epoch") == epoch and body.get("position") == position:
            try:
                return AfterSwitch(position, int(body["count"]), [str(p) for p in body.get("paths") or []][:SHOWN],
                                   bool(body.get("atLeast")), str(body.get("followedBy") or "?"),
                                   bool(body.get("complete")))
            except (KeyError, TypeError, ValueError):
                pass
    return AfterSwitch(position, None, complete=False)


class _Broken(Exception):
    """The old store's change stream broke: what it got meanwhile is not known."""


class Follower:
    """Follows the store the cluster came from into ``home`` and keeps there what was written
    after the switch (module doc). ``open_store`` opens a store by the URL a flag or origin names,
    with the agent's credentials for it. Runs until cancelled; never raises otherwise."""

    def __init__(
        self, home: MetadataStore, open_store: Callable[[str], Awaitable[MetadataStore]], node_id: str
    ) -> None:
        self.home = home
        self._open = open_store
        self.node_id = node_id
        self.found: set[str] = set()
        """The paths written after the switch, as known now."""
        self.complete = False
        """The walk is done: ``found`` is every node written after the switch."""
        self.following: str | None = None
        """The URL of the store followed now."""
        self._version: int | None = None
        self._published: tuple[Any, ...] | None = None
        self._failing: str | None = None
        self._told = (0, -TELL_SECONDS)
        """(count, when) of the last warning about writes in the old store."""

    async def run(self) -> None:
        while True:
            try:
                wanted = await self._wanted()
                if wanted is None:
                    await asyncio.sleep(LOOK_SECONDS)
                    continue
                await self._follow_at(*wanted)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the old store is a side matter: never the coordinator's end
                self._fail(f"{type(e).__name__}: {e}")
                await asyncio.sleep(RETRY_SECONDS)

    async def _wanted(self) -> tuple[str, int] | None:
        """(URL, epoch) of the migration that brought the cluster into ``home``, while the cluster
        lives there and no migration from there is under way or leaves a copy behind (its target
        may be that very store: the copy's writes are not a member's)."""
        state = await read_state(self.home)
        origin, flag = state.origin, state.current_flag
        if origin is None or state.left_for is not None:
            return None
        if flag is not None and (flag.phase.in_progress or flag.holds_writes
                                 or (flag.phase is Phase.FAILED and not flag.target_cleaned)):
            return None
        return origin.source_url, origin.epoch

    async def _follow_at(self, url: str, epoch: int) -> None:
        try:
            store = await self._open(url)
        except MetadataStoreError as e:
            self._fail(f"cannot open {url}: {e}")
            await asyncio.sleep(RETRY_SECONDS)
            return
        try:
            while True:
                state = await read_state(store)
                flag = state.flag
                if (flag is not None and flag.epoch == epoch and state.left_for is not None and flag.released
                        and flag.switch_position is not None):
                    break
                # nothing to follow there now (the cluster came back there, or an older metashift
                # switched without recording where): look again now and then
                await asyncio.sleep(LOOK_SECONDS * 5)
                if await self._wanted() != (url, epoch):
                    return
            self.following = url
            await self._follow(store, url, epoch, flag.switch_position)
        except (_Broken, MetadataStoreError) as e:
            self._fail(str(e))
            await asyncio.sleep(RETRY_SECONDS)
        finally:
            self.following = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._withdraw(store), 5.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(store.close(), 10.0)

    async def _follow(self, store: MetadataStore, url: str, epoch: int, position: int) -> None:
        """Listen, walk once, then keep up from the stream until ``home`` no longer wants ``url``."""
        changes: dict[str, bool] = {}
        woke = asyncio.Event()
        broken: list[str] = []

        def heard(n: Notification) -> None:
            if paths.is_protocol_path(n.path) or n.type is NotificationType.CHILDREN_CHANGED:
                return
            changes[n.path] = n.type is not NotificationType.DELETED
            woke.set()

        def session(event: SessionEvent) -> None:
            if event in (SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST) and not broken:
                broken.append(f"the watch on {url} broke ({event.value}): what it got meanwhile is walked again")
                woke.set()

        removers = [store.add_listener(heard, under="/"), store.add_session_listener(session)]
        try:
            await store.watch_ready()  # every change from here on is heard: the walk covers the ones before
            self.found, self.complete, self._published = set(), False, None
            since = now_ms()
            await self._publish(store, epoch, position, since)
            if self._failing is not None:
                log.info("following %s again", url)
                self._failing = None
            else:
                log.info("following %s, which the cluster left in epoch %d: what a member writes there is not the "
                         "cluster's", url, epoch)
            shown = time.monotonic()
            if isinstance(store, BulkStore):
                async for page in store.walk("/", prune=(paths.ROOT,)):
                    for node in page:
                        if node.position > position and len(self.found) < KEPT:
                            self.found.add(node.path)
                    if broken:
                        raise _Broken(broken[0])
                    if time.monotonic() - shown > PROGRESS_SECONDS:
                        shown = time.monotonic()
                        if await self._wanted() != (url, epoch):
                            return  # a migration from the home began: not a walk beside its copy
                        await self._publish(store, epoch, position, since)
            self.complete = True
            log.info("walked %s once: %d node(s) written there after the switch; following its changes", url,
                     len(self.found))
            looked = time.monotonic()
            while True:
                if broken:
                    raise _Broken(broken[0])
                woke.clear()
                taken, changes = changes, {}
                for path, exists in taken.items():  # what the stream said last wins over the walk
                    if not exists:
                        self.found.discard(path)
                    elif len(self.found) < KEPT:
                        self.found.add(path)
                await self._publish(store, epoch, position, since)
                if time.monotonic() - looked >= LOOK_SECONDS:
                    looked = time.monotonic()
                    if await self._wanted() != (url, epoch):
                        return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), LOOK_SECONDS)
                if woke.is_set():
                    await asyncio.sleep(PUBLISH_SECONDS)  # a burst of writes: one record write for it
        finally:
            for remove in removers:
                remove()

    async def _publish(self, store: MetadataStore, epoch: int, position: int, since: int) -> None:
        """Write the record when what it says changed (an ephemeral of this follower's session)."""
        count = len(self.found)
        at_least = count >= KEPT
        shown = heapq.nsmallest(SHOWN, self.found)
        said = (count, at_least, tuple(shown), self.complete)
        if said == self._published:
            return
        body = json.dumps({"epoch": epoch, "position": position, "count": count, "paths": shown, "atLeast": at_least,
                           "followedBy": self.node_id, "since": since, "complete": self.complete,
                           "updatedAt": now_ms()}, separators=(",", ":")).encode()
        if self.complete and count > self._told[0] and time.monotonic() - self._told[1] >= TELL_SECONDS:
            log.warning("%d node(s) written in the store the cluster left after the switch, not seen by the cluster "
                        "(a member still writes there, bypassing the agents): %s", count, ", ".join(shown[:3]))
            self._told = (count, time.monotonic())
        path = record_path()
        for _ in range(3):
            if self._version is not None:
                try:
                    self._version = (await store.put(path, body, self._version, ephemeral=True)).version
                    self._published = said
                    return
                except (BadVersion, NotFound):
                    self._version = None
            got = await store.get(path)
            if got is not None and got[1].created_by_self:
                self._version = got[1].version
                continue
            if got is not None:  # a follower that is gone (its session not yet expired), or a deposed one
                with contextlib.suppress(BadVersion, NotFound):
                    await store.delete(path, expected_version=got[1].version)
            try:
                self._version = (await store.put(path, body, -1, ephemeral=True)).version
                self._published = said
                return
            except BadVersion:
                continue

    async def _withdraw(self, store: MetadataStore) -> None:
        """Remove the record (it would go with the session anyway)."""
        if self._version is not None:
            with contextlib.suppress(BadVersion, NotFound):
                await store.delete(record_path(), expected_version=self._version)
        self._version = None

    def _fail(self, why: str) -> None:
        if why != self._failing:
            log.warning("not following the store the cluster left: %s; trying again", why)
            self._failing = why
