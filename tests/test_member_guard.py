"""The coordinator's member guard on real stores: a member started past the pre-flight check
(``--force``) that creates a new ephemeral fails the migration, and the reason names the member
(its registration, seen by the last scan), not "a client" (``MemberGuard``'s module doc)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metashift.coordinator.change_tracker import ChangeTracker
from metashift.coordinator.member_guard import MemberGuard
from metashift.migration.flag import Forced, MigrationFlag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, Store
from tests.harness import eventually

BROKER = "/loadbalance/brokers/127.0.0.1:8080"
#: A ledger id generator's ephemeral (Pulsar's on etcd and Oxia), created after the start.
IDGEN = "/ledgers/idgen/ID-0000000273"


async def _mkdirs(store: MetadataStore, path: str) -> None:
    parts = path.split("/")
    for i in range(2, len(parts)):
        at = "/".join(parts[:i])
        if not await store.exists(at):
            await store.put(at, b"")


async def test_a_forced_members_new_ephemeral_fails_the_migration_naming_the_member(
    store: MetadataStore, store_url: str, open_stores: Callable[..., Any]
) -> None:
    member = await open_stores(store_url)  # a broker on the source directly: a session of its own
    for path in (BROKER, IDGEN):
        await _mkdirs(member, path)
    registered = await member.put(BROKER, b"{}", ephemeral=True)
    flag = MigrationFlag(Phase.SYNCING, "zk://127.0.0.1:1/target", 1,
                         forced=Forced("testing", ("broker 127.0.0.1:8080 bypasses",), (registered.owner,)))
    # the coordinator's reads since (the flag's, a pass's) are past the registration: an etcd watch
    # starts after the last revision its connection saw
    assert await store.get(BROKER) is not None
    tracker = ChangeTracker(store)
    tracker.start()
    await tracker.ready()
    assert isinstance(store, Store)  # opened directly: its ephemerals' owners are read
    guard = MemberGuard(store, tracker)
    assert await guard.scan(flag) is None  # --force accepted its session
    assert set(guard.tolerated) == {BROKER}
    await member.put(IDGEN, b"", ephemeral=True)
    await eventually(lambda: IDGEN in tracker.created, within=60, what="the tracker saw the new ephemeral")
    why = await guard.check(flag)
    tracker.stop()
    assert why is not None
    assert why.startswith(f"a member joined around the agents: {IDGEN} is an ephemeral of session "
                          f"0x{registered.owner:x}, which no agent holds (broker 127.0.0.1:8080 reaches "
                          "the source directly"), why
