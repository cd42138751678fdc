"""Following every change to the source outside the migration's own subtree.

From the start of a full pass on, the tracker collects the paths that changed, so that the
coordinator can carry them over again (SYNCING, while writes flow) and, inside the freeze, carry
exactly the last ones and then hold the source to being frozen: a change after the barrier is a
writer that bypasses the agents. A break in the stream (connection lost, session lost, an etcd
watch resumed after compaction, which the store reports as ConnectionLost) means changes may
have been missed: the delta is no longer trusted.

Following the whole tree costs an event for every write of the cluster, so a tracker listens
to the whole tree only while it needs to; otherwise only to the migration's own subtree (the
markers below). The leader follows from the start of each full pass. A standby candidate starts
following when the leader's first round of changes begins (its ``carrying`` marker: the full
pass's bulk copy is over, so the standbys are not sent the cluster's writes while the copy
needs the machine), and is anchored at the first round it saw begin after the store confirmed
its watch: once the leader writes ``carried``, every change before that round's ``carrying``
is in the target, and the standby knows every one after. It also starts again from each
``pass`` marker it sees while following. So a standby that takes over inside the freeze knows
every path that changed since the leader last carried, and carries and checks those; one that is
not anchored (it started late, or the leader went to the freeze before a round it saw) makes the
freeze's last pass a full one. Once no migration is in progress (``idle``) a tracker listens
to the migration's subtree only again.

Oxia sends its notifications on one stream per shard, each in write order but not with one
another: a barrier is written on every shard and waits for all (``barrier``), and a standby on a
store of several shards is never anchored (a change just after a marker may come before it on
another shard), so its takeover in the freeze makes the last pass a full one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from metashift.migration import paths
from metashift.stores import MetadataStore, Notification, NotificationType, SessionEvent

log = logging.getLogger(__name__)


class ChangeTracker:
    """Collects every change to the source outside the migration's own subtree (``paths.ROOT``)."""

    def __init__(self, source: MetadataStore) -> None:
        self.source = source
        self.pending: dict[str, NotificationType] = {}
        """Changed since they were last carried over (``take``)."""
        self.since_pass: set[str] = set()
        """Changed since the last full pass began: mismatches there are expected."""
        self.created: set[str] = set()
        """Created since ``take_created`` last took them (``MemberGuard`` looks at who holds the
        ephemerals among them)."""
        self.broken: str | None = None
        self.anchored = False
        """Following since a full pass began (this coordinator's, or a ``pass`` marker seen)."""
        self.standby = True
        """Not leading: a ``pass`` marker starts the collection again."""
        self._removers: list[Callable[[], None]] = []
        self._barriers: dict[str, asyncio.Event] = {}
        self._seq = 0
        self._changed_at: dict[str, int] = {}
        """Path -> the sequence number of its last change (a standby's, to forget carried rounds)."""
        self._carrying: int | None = None
        self._wide = False
        self._watch_confirmed = False
        """The store confirmed the whole tree's watch (since the last start of following)."""
        self._generation = 0
        self._confirming: asyncio.Task[None] | None = None  # held: the loop keeps only weak references

    @property
    def active(self) -> bool:
        """Following the whole tree (not only the migration's subtree)."""
        return self._wide

    @property
    def trusted(self) -> bool:
        """Following since the last full pass began without a break."""
        return self.active and self.anchored and self.broken is None

    @property
    def generation(self) -> int:
        """Counts the starts of following: ``idle`` given an older one does nothing."""
        return self._generation

    def start(self) -> None:
        """Lead: follow from now on, forgetting what was collected (a new full pass begins).
        ``ready`` waits until the store confirmed the watch."""
        self.standby = False
        self._generation += 1  # an ``idle`` decided on an older reading of the flag does nothing
        self._restart()
        self._listen(wide=True)

    async def ready(self) -> None:
        """The store's server confirmed the watch of the whole tree: no later change is missed."""
        await self.source.watch_ready()

    def follow(self) -> None:
        """Stand by: listen to the migration's markers, and follow the whole tree from the
        leader's first round of changes on (the module's doc)."""
        self.standby = True
        if not self._removers:
            self._listen(wide=False)

    def idle(self, generation: int) -> None:
        """No migration is in progress (as read after ``generation`` was taken): listen to the
        migration's subtree only, forgetting what was collected. Nothing when following began
        again since."""
        if generation != self._generation or not self._wide:
            return
        self._forget()
        self.anchored = False
        self._listen(wide=False)

    def _restart(self, *, anchored: bool = True) -> None:
        self._forget()
        self.broken = None
        self.anchored = anchored

    def _forget(self) -> None:
        """Drop what was collected."""
        self.pending.clear()
        self.since_pass.clear()
        self.created.clear()
        self._changed_at.clear()
        self._carrying = None

    def _carried(self) -> None:
        """The leader carried every change made before its ``carrying`` marker: forget those."""
        mark, self._carrying = self._carrying, None
        if mark is None:
            return
        for path in [p for p, seq in self._changed_at.items() if seq <= mark]:
            self.pending.pop(path, None)
            self.created.discard(path)  # the leader looked at who holds it (``MemberGuard``)
            del self._changed_at[path]
        # followed since before that round began: knows every change since, when the store sends
        # its notifications in write order; on several streams (Oxia's shards) a change after the
        # marker may come before it on another stream and be forgotten here: never anchored
        if self._watch_confirmed and self.source.notifications_in_order:
            self.anchored = True

    def _listen(self, *, wide: bool) -> None:
        """Listen to the whole tree (``wide``) or to the migration's subtree only."""
        if self._removers and wide == self._wide:
            return
        for remove in self._removers:
            remove()
        self._wide = wide
        self._watch_confirmed = False
        if wide:
            self._generation += 1
            self.broken = None
            self._confirming = asyncio.get_running_loop().create_task(self._confirm(self._generation))
        self._removers = [
            self.source.add_listener(self._on_change, under="/" if wide else paths.ROOT),
            self.source.add_session_listener(self._on_session_event),
        ]

    async def _confirm(self, generation: int) -> None:
        await self.source.watch_ready()
        if generation == self._generation and self._wide:
            self._watch_confirmed = True

    def stop(self) -> None:
        for remove in self._removers:
            remove()
        self._removers = []
        self._wide = False
        self.anchored = False

    def take_created(self) -> set[str]:
        """The paths created since the last call; collecting goes on."""
        taken, self.created = self.created, set()
        return taken

    def take(self) -> dict[str, NotificationType]:
        """The changes collected since the last ``take``; collecting goes on."""
        taken, self.pending = self.pending, {}
        return taken

    def add_stale(self, stale: list[str]) -> None:
        """Paths a full pass found only in the target: nodes an earlier pass copied that the source
        deleted unseen (while the stream was broken, or before this pass began). They are carried
        like deletions (the carry reads the source again) and are expected until then."""
        for path in stale:
            self.pending.setdefault(path, NotificationType.DELETED)
            self.since_pass.add(path)

    def _on_change(self, n: Notification) -> None:
        if paths.is_protocol_path(n.path):
            barrier = self._barriers.get(n.path)
            if barrier is not None:
                barrier.set()
            if self.standby and n.type is not NotificationType.DELETED:
                if n.path == paths.CARRYING and not self._wide:
                    self._listen(wide=True)  # the leader's rounds began: follow, anchor at the next
                elif n.path == paths.PASS and self._watch_confirmed:
                    # the leader's full pass begins: what changed before, it copies
                    self._restart(anchored=self.source.notifications_in_order)
                elif n.path == paths.CARRYING and self._watch_confirmed:
                    self._carrying = self._seq
                elif n.path == paths.CARRIED:
                    self._carried()
            return
        # child lists change with every create and delete, which are reported on their own
        if n.type is NotificationType.CHILDREN_CHANGED:
            return
        if n.type is not NotificationType.DELETED or n.path not in self.pending:
            self.pending[n.path] = n.type  # a write after a delete is what counts
        if n.type is NotificationType.CREATED:
            self.created.add(n.path)
        self.since_pass.add(n.path)
        if self.standby:
            self._seq += 1
            self._changed_at[n.path] = self._seq

    def _on_session_event(self, event: SessionEvent) -> None:
        if event in (SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST) and self.broken is None:
            self.broken = f"the coordinator's watch on the source broke ({event.value}): changes may have been missed"
            log.warning("%s", self.broken)

    async def barrier(self, path: str, value: bytes, within: float) -> None:
        """Make every change written before now reach the tracker: write ``value`` at ``path``, a
        node of the protocol subtree, and wait for its own notification; on a store with several
        notification streams (Oxia's shards: ``barrier_paths``), at a sibling on each stream too,
        and wait for every one. ``TimeoutError`` after ``within`` seconds, the writes included (a
        write retried while the store elects a leader counts in the freeze the barrier is part of)."""
        nodes = self.source.barrier_paths(path)
        heard = {node: asyncio.Event() for node in nodes}
        self._barriers.update(heard)
        try:
            async with asyncio.timeout(within):
                await asyncio.gather(*(self.source.put(node, value) for node in nodes))
                await asyncio.gather(*(e.wait() for e in heard.values()))
        finally:
            for node in nodes:
                self._barriers.pop(node, None)

    async def violation(self, target: MetadataStore | None = None) -> str | None:
        """Why the frozen source cannot be trusted, or ``None``: a break, or a change still
        pending. A deleted node counts only when the target still has it (an ephemeral that went
        with a dead agent's session was never copied); with no ``target``, deletions wait."""
        if self.broken is not None:
            return self.broken
        for path, kind in sorted(self.pending.items()):
            if kind is NotificationType.DELETED:
                if target is None:
                    continue
                got = await self.source.get(path)
                if got is None and not await target.exists(path):
                    continue
            return f"{path} was written in the source during the freeze ({kind.value}), bypassing the agents"
        return None
