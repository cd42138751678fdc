"""The coordinator's change tracker on real stores: what it listens to, and when a standby may
take over the freeze knowing what changed (``ChangeTracker``'s module doc)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from metashift.coordinator.change_tracker import ChangeTracker
from metashift.migration import paths
from metashift.stores import MetadataStore
from metashift.stores.simulated import CallFault, SimulatedServers
from tests.harness import eventually


async def test_a_standby_follows_from_the_first_round_and_is_anchored_at_the_next(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    leader = await open_stores(store_url)  # writes what the leader and the cluster's clients write
    tracker = ChangeTracker(store)
    tracker.follow()
    assert store.watched == {paths.ROOT}  # only the migration's markers: no event per cluster write
    await leader.put("/before", b"x", expected_version=-1)
    await leader.put(paths.PASS, b"{}")
    await leader.put(paths.CARRYING, b"1")  # the leader's first round begins: the standby follows
    await eventually(lambda: tracker.active, within=60, what="the standby follows the whole source")
    assert store.watched == {"/"}
    await tracker.ready()
    await eventually(lambda: _confirmed(tracker), within=60, what="the server confirmed the watch")
    await leader.put(paths.CARRIED, b"1")
    assert not tracker.trusted  # the round that started it began before its watch: not anchored
    await leader.put("/in-round-2", b"x", expected_version=-1)
    await leader.put(paths.CARRYING, b"2")
    await leader.put("/after-round-2-began", b"x", expected_version=-1)
    await leader.put(paths.CARRIED, b"2")
    if not store.notifications_in_order:
        # Oxia's shards: a change just after a marker may come before it on another shard's
        # stream; the standby never trusts a delta (its takeover in the freeze is a full pass)
        await tracker.barrier(paths.BARRIER, b"1", 60)
        assert not tracker.trusted
        assert "/after-round-2-began" in tracker.pending
        tracker.stop()
        return
    await eventually(lambda: tracker.trusted, within=60, what="anchored at the round it saw begin")
    # what round 2 carried is forgotten; what came after its start is known; nothing from before
    assert set(tracker.pending) == {"/after-round-2-began"}
    tracker.idle(tracker.generation)  # no migration in progress any more
    assert not tracker.active and not tracker.trusted
    assert store.watched == {paths.ROOT}
    tracker.stop()
    assert store.watched == frozenset()


async def test_idle_decided_on_an_older_reading_does_not_stop_a_leader(store: MetadataStore) -> None:
    tracker = ChangeTracker(store)
    tracker.follow()
    generation = tracker.generation  # taken before the flag was read (no migration then)
    tracker.start()  # meanwhile the leader began a full pass
    tracker.idle(generation)
    assert tracker.active and tracker.trusted and store.watched == {"/"}
    tracker.stop()


async def test_a_barrier_is_heard_on_every_notification_stream(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    """The barrier is written on every stream the store sends notifications on (one per Oxia
    shard, else one) and returns once each was heard: a change written before it on any shard is
    collected by then."""
    writer = await open_stores(store_url)
    tracker = ChangeTracker(store)
    tracker.start()
    await tracker.ready()
    nodes = store.barrier_paths(paths.BARRIER)
    assert nodes[0] == paths.BARRIER and len(set(nodes)) == len(nodes)
    assert len(nodes) == (1 if store.notifications_in_order else 4)  # the test servers' shards
    written = [f"/spread/{i}" for i in range(32)]  # keys on every shard
    for path in written:
        await writer.put(path, b"x")
    await tracker.barrier(paths.BARRIER, b"1", 60)
    assert set(written) <= set(tracker.pending)
    for node in nodes:
        assert await writer.get(node) is not None, node
    assert not tracker._barriers
    tracker.stop()


def _confirmed(tracker: ChangeTracker) -> bool:
    return bool(tracker._watch_confirmed)


async def test_a_barrier_whose_write_hangs_times_out_within_its_bound() -> None:
    """Inside the freeze every write of the cluster waits for the barrier: a barrier write that a
    store holds (a ZooKeeper client reconnecting while the ensemble elects) counts against the
    barrier's bound, not only its notification's wait (the chaos run's zk->oxia seed 28: a 14 s
    freeze)."""

    class HoldBarrier:
        def on_call(self, server: str, store: str, kind: str, path: str) -> CallFault:
            return CallFault(delay=30.0) if kind == "put" and path.endswith(paths.BARRIER) else CallFault()

    store = await SimulatedServers(faults=HoldBarrier()).open("sim://s/root")
    tracker = ChangeTracker(store)
    tracker.start()
    try:
        await tracker.ready()
        # before, the bound covered only the wait for the notification, which the write's own
        # answer brings at once: this barrier came back, 30 s later
        with pytest.raises(TimeoutError):
            await tracker.barrier(paths.BARRIER, b"1", 0.2)
        await tracker.barrier(paths.CARRYING, b"1", 10)  # the stream itself still works
    finally:
        tracker.stop()
        await store.close()
