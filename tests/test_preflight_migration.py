"""Watched until the end (issue 31): from the start to the switch, a member that registers or writes
around the agents fails the migration before COMPLETED; after the switch, ``migrate status`` read
from the store the cluster left names what was written there since.

Agents are ``metashift agent`` processes (each a coordinator candidate running the Spark copy);
members are kazoo clients through the agents' ZooKeeper fronts, the forgotten one on the store
directly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from metashift.migration.flag import MigrationFlag, read_flag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore
from metashift_lab.servers import LocalEtcd, LocalZooKeeper
from tests.agent_processes import FORGOTTEN, Agents, Member, cli, hosts_of, member_cluster, wait_flag
from tests.harness import eventually

REGISTRATION = f"/loadbalance/brokers/{FORGOTTEN}"
#: Bounds for a migration of a small tree on a loaded two-core machine (Spark starts in each pass).
MIGRATION_S = 300.0


async def _flag(source: MetadataStore) -> MigrationFlag | None:
    return await read_flag(source)


async def _wait_phase(source: MetadataStore, *phases: Phase) -> MigrationFlag:
    return await wait_flag(source, *phases, within=MIGRATION_S)


async def _with_forgotten_broker(
    zk_server: LocalZooKeeper, zk_url: str, agents: Agents, members: list[Member], open_stores: Any,
) -> tuple[MetadataStore, Member]:
    await member_cluster(agents, members, zk_url)
    forgotten = await Member(hosts_of(zk_server, zk_url)).start(REGISTRATION)
    members.append(forgotten)
    source: MetadataStore = await open_stores(zk_url)
    await source.put("/admin/policies/public/default", b'{"ttl":1}')
    return source, forgotten


async def test_forced_past_a_forgotten_broker_that_then_writes_fails_before_completed(
    zk_server: LocalZooKeeper, zk_url: str, etcd_url: str, agents: Agents, members: list[Member], open_stores: Any,
) -> None:
    source, forgotten = await _with_forgotten_broker(zk_server, zk_url, agents, members, open_stores)
    reason = "broker 127.0.0.1:8081 is drained and leaves the cluster"
    started = cli("migrate", "start", "--source", zk_url, "--target", etcd_url, "--force", "--reason", reason)
    assert started.returncode == 0, started.stderr
    assert f"overridden by --force: broker {FORGOTTEN} is registered through a session no agent holds" in started.stderr
    status = json.loads(cli("migrate", "status", "--source", zk_url, "--json").stdout)
    assert status["forced"]["reason"] == reason
    assert status["forced"]["sessions"] == [forgotten.session]
    assert any(p.startswith(f"broker {FORGOTTEN} is registered") for p in status["forced"]["problems"])
    text = cli("migrate", "status", "--source", zk_url).stdout
    assert f"forced       {reason}" in text, text

    await _wait_phase(source, Phase.SYNCING)
    await forgotten.write(REGISTRATION, b'{"load":"rewritten by a broker the agents do not front"}')
    flag = await _wait_phase(source, Phase.FAILED, Phase.COMPLETED)
    assert flag.phase is Phase.FAILED, flag
    assert flag.reason is not None and REGISTRATION in flag.reason, flag.reason
    # the reason says which session, unless the write fell into the freeze (then the freeze names it)
    assert forgotten.session in flag.reason or "bypassing the agents" in flag.reason, flag.reason


async def test_a_member_that_joins_around_the_agents_during_syncing_fails_it(
    zk_server: LocalZooKeeper, zk_url: str, etcd_url: str, agents: Agents, members: list[Member], open_stores: Any,
) -> None:
    await member_cluster(agents, members, zk_url)
    source: MetadataStore = await open_stores(zk_url)
    await source.put("/admin/policies/public/default", b'{"ttl":1}')
    started = cli("migrate", "start", "--source", zk_url, "--target", etcd_url)
    assert started.returncode == 0, started.stderr
    await _wait_phase(source, Phase.SYNCING)
    joined = await Member(hosts_of(zk_server, zk_url)).start(REGISTRATION)
    members.append(joined)
    flag = await _wait_phase(source, Phase.FAILED, Phase.COMPLETED)
    assert flag.phase is Phase.FAILED, flag
    assert flag.reason is not None and REGISTRATION in flag.reason, flag.reason
    assert joined.session in flag.reason or "bypassing the agents" in flag.reason, flag.reason


@pytest.mark.parametrize("direction", ["zk-to-etcd", "etcd-to-zk"])
async def test_status_of_the_store_left_names_what_was_written_there_after_the_switch(
    direction: str, zk_server: LocalZooKeeper, etcd_server: LocalEtcd, zk_url: str, etcd_url: str, agents: Agents,
    members: list[Member], open_stores: Any,
) -> None:
    """A forced migration completes while the forgotten member keeps quiet; what it writes into the
    old store afterwards is not the cluster's, and ``status`` there says so."""
    source_url, target_url = (zk_url, etcd_url) if direction == "zk-to-etcd" else (etcd_url, zk_url)
    await member_cluster(agents, members, source_url)
    source: MetadataStore = await open_stores(source_url)
    await source.put("/admin/policies/public/default", b'{"ttl":1}')
    if direction == "zk-to-etcd":
        forgotten = await Member(hosts_of(zk_server, zk_url)).start(REGISTRATION)
        members.append(forgotten)
        writer: Any = forgotten
    else:
        writer = await open_stores(etcd_url)
        await writer.put(REGISTRATION, b"{}", ephemeral=True)
    started = cli("migrate", "start", "--source", source_url, "--target", target_url, "--force", "--reason",
                   "a broker we cannot restart today")
    assert started.returncode == 0, started.stderr
    flag = await _wait_phase(source, Phase.COMPLETED, Phase.FAILED)
    assert flag.phase is Phase.COMPLETED, flag
    assert flag.switch_position is not None
    # nothing of the cluster's is written into the old store after the switch: none named, once
    # the coordinator elected where the cluster lives follows the old store (its first walk done)
    await eventually(lambda: _agents_left(source), within=60, what="the agents left the old store")
    quiet = await _followed(source_url)
    assert quiet["writes_after_switch"] == {
        "position": flag.switch_position, "count": 0, "paths": [], "at_least": False,
        "followed_by": quiet["writes_after_switch"]["followed_by"], "complete": True, "scanned": False,
    }, quiet
    assert quiet["writes_after_switch"]["followed_by"] in ("bookie-1", "broker-1"), quiet
    # read from the store left: where the agents are now, and the copy of the whole migration
    assert quiet["agents_now"] == {"store": target_url, "count": 2, "node_ids": ["bookie-1", "broker-1"]}, quiet
    assert quiet["participants"] == [] and quiet["copy"]["summary"].startswith("1 full pass(es), the last "), quiet
    assert quiet["copy"]["done"] == quiet["copy"]["total"] and quiet["copy"]["total"] > 0, quiet
    left = cli("migrate", "status", "--source", source_url).stdout
    assert f"agents now   2 in {target_url} (bookie-1, broker-1)" in left, left
    assert "participants 0 here (the agents moved with the cluster)" in left, left
    # read from where it arrived: it lives there, not NOT_STARTED
    arrived = cli("migrate", "status", "--source", target_url)
    assert arrived.stdout.startswith(f"phase        none in progress: the cluster lives here (arrived from "
                                     f"{source_url} in epoch 1)"), arrived.stdout
    assert json.loads(cli("migrate", "status", "--source", target_url, "--json").stdout)["lives_here"] is True

    if direction == "zk-to-etcd":
        await writer.write("/admin/policies/public/default", b'{"ttl":2}')
        await writer.write("/admin/policies/public/late", b"{}")
    else:
        await writer.put("/admin/policies/public/default", b'{"ttl":2}')
        await writer.put("/admin/policies/public/late", b"{}")
    status = await _followed(source_url, lambda written: written["count"] == 2)
    written = status["writes_after_switch"]
    assert written["paths"] == ["/admin/policies/public/default", "/admin/policies/public/late"], status
    scanned = json.loads(cli("migrate", "status", "--source", source_url, "--scan", "--json").stdout)
    assert {k: scanned["writes_after_switch"][k] for k in ("count", "paths", "scanned")} == {
        "count": 2, "paths": written["paths"], "scanned": True}, scanned
    text = cli("migrate", "status", "--source", source_url).stdout
    print(text)
    assert "2 node(s) written in this store after the cluster left it" in text, text
    assert "/admin/policies/public/late" in text
    # where the cluster lives now, the write is not there: it was lost to the cluster, and said so
    target: MetadataStore = await open_stores(target_url)
    got = await target.get("/admin/policies/public/default")
    assert got is not None and got[0] == b'{"ttl":1}'


async def _followed(source_url: str, holds: Any = lambda written: True) -> dict[str, Any]:
    """``migrate status --json`` read from the store the cluster left, once its follower's first
    walk is done and ``holds(writes_after_switch)``."""
    found: dict[str, Any] = {}

    async def followed() -> bool:
        found.update(json.loads(cli("migrate", "status", "--source", source_url, "--json").stdout))
        written = found["writes_after_switch"] or {}
        return bool(written.get("complete") and written.get("followed_by") and holds(written))

    await eventually(followed, within=120, what="the old store followed")
    return found


async def _agents_left(store: MetadataStore) -> bool:
    from metashift.migration.participants import list_participants

    return await list_participants(store) == []
