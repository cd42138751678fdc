"""metashift's nodes live below a root of their own (issue 33): ``/metashift`` by default, another
with the agents' ``migration.root`` and the commands' ``--migration-root``, never PIP-454's
``/pulsar/migration-coordinator`` (which Pulsar 4.2+ reads and acts on itself). What an older
metashift left there is still read: its flag (a migration it completed is followed) and its
sequence floors (no id handed out twice)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from metashift.migration import paths
from metashift.migration.flag import MigrationFlag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, reserved
from metashift.stores.sequence_floors import LEGACY_FLOORS_ROOT, floor_path, read_floor, take_from_floor
from tests.agent_processes import Agents, cli
from tests.harness import Gateways, eventually


async def test_agents_register_below_metashifts_own_root(zk_url: str, gateways: Gateways, open_stores: Any) -> None:
    await gateways.start(zk_url, {"node_id": "broker-1"})
    source: MetadataStore = await open_stores(zk_url)
    assert paths.ROOT == reserved.DEFAULT_ROOT == "/metashift"
    names = await source.get_children("/metashift/participants")
    assert len(names) == 1 and names[0].startswith("id-")
    assert await source.get_children("/pulsar/migration-coordinator") == []  # nothing of ours there


async def test_a_root_of_the_operators_choice(zk_url: str, etcd_url: str, agents: Agents,
                                              open_stores: Any) -> None:
    await agents.start(zk_url, "broker-1", "broker", migration_root="/ops/metashift")
    source: MetadataStore = await open_stores(zk_url)
    await eventually(lambda: _registered(source, "/ops/metashift/participants"), what="registered below /ops/metashift")
    assert await source.get_children("/metashift/participants") == []
    done = cli("migrate", "check", "--source", zk_url, "--target", etcd_url, "--json",
               "--migration-root", "/ops/metashift")
    report = json.loads(done.stdout)
    assert [a["node_id"] for a in report["agents"]] == ["broker-1"], report
    assert report["agents"][0]["target_open"] == {"ok": True, "error": None}
    # the same command without the root finds nobody: the root is the cluster's, every command's too
    done = cli("migrate", "check", "--source", zk_url, "--target", etcd_url, "--json")
    assert "no agent is registered" in json.loads(done.stdout)["refusals"][0]


@pytest.mark.parametrize("root", ["/", "/pulsar/migration-coordinator", "/pulsar/migration-coordinator/x",
                                  "/zookeeper/x", "relative"])
def test_a_root_that_cannot_be_one_is_refused(root: str, zk_url: str, etcd_url: str) -> None:
    done = cli("migrate", "status", "--source", zk_url, "--migration-root", root)
    assert done.returncode == 2 and "--migration-root" in done.stderr and "Traceback" not in done.stderr, done.stderr
    env_done = _agent_with_env(zk_url, root)
    assert env_done.returncode == 2 and "migration.root" in env_done.stderr, env_done.stderr


def _agent_with_env(zk_url: str, root: str) -> Any:
    import os
    import subprocess
    import sys

    env = dict(os.environ, METASHIFT_MIGRATION_ROOT=root)
    return subprocess.run([sys.executable, "-m", "metashift.cli", "agent", "--source", zk_url, "--listen",
                           "unix:/tmp/metashift-never.sock"], capture_output=True, text=True, timeout=60, env=env,
                          stdin=subprocess.DEVNULL)


async def test_an_older_metashifts_completed_migration_is_followed(zk_url: str, etcd_url: str, gateways: Gateways,
                                                                   open_stores: Any) -> None:
    """A store an older metashift migrated away from holds its COMPLETED flag at PIP-454's place:
    an agent of this version started on it goes where the cluster went, and the commands say so."""
    source: MetadataStore = await open_stores(zk_url)
    target: MetadataStore = await open_stores(etcd_url)
    await target.put("/admin/clusters/c1", b"{}")
    old = MigrationFlag(Phase.COMPLETED, etcd_url, 1, coordinator="broker-1", started_at=1, phase_since=2)
    await source.put(paths.LEGACY_FLAG, old.to_json())
    agent = await gateways.start(zk_url, {"node_id": "broker-1"})
    assert agent.router.active.url.scheme == "etcd"  # serving from where the cluster lives now
    status = json.loads(cli("migrate", "status", "--source", zk_url, "--json").stdout)
    assert (status["phase"], status["lives_on"], status["epoch"]) == ("COMPLETED", etcd_url, 1), status
    refused = cli("migrate", "start", "--source", zk_url, "--target", etcd_url)
    assert refused.returncode == 2 and "already completed" in refused.stderr, refused.stderr
    # Pulsar's own flag there (no epoch: PIP-454's) is not metashift's, and means nothing to it
    await source.put(paths.LEGACY_FLAG, b'{"phase":"COMPLETED","targetUrl":"oxia://elsewhere:6648"}')
    status = json.loads(cli("migrate", "status", "--source", zk_url, "--json").stdout)
    assert status["phase"] == "NOT_STARTED", status


async def test_an_older_metashifts_sequence_floors_still_hold(zk_url: str, open_stores: Any) -> None:
    store: MetadataStore = await open_stores(zk_url)
    legacy = f"{LEGACY_FLOORS_ROOT}/%2Fledgers%2Fidgen"
    await store.put(legacy, b'{"parent":"/ledgers/idgen","next":4242}')
    assert floor_path("/ledgers/idgen") == "/metashift/sequence-floors/%2Fledgers%2Fidgen"
    assert await read_floor(store, "/ledgers/idgen") == 4242
    assert await take_from_floor(store, "/ledgers/idgen") == 4242  # moved to its place first
    assert await take_from_floor(store, "/ledgers/idgen") == 4243
    assert await read_floor(store, "/ledgers/idgen") == 4244
    got = await store.get(floor_path("/ledgers/idgen"))
    assert got is not None and json.loads(got[0]) == {"parent": "/ledgers/idgen", "next": 4244}


async def _registered(store: MetadataStore, parent: str) -> bool:
    return bool(await store.get_children(parent))
