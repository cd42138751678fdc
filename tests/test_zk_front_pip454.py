"""PIP-454's flag behind an agent (issue 33): Pulsar 4.2+ brokers and bookies read
``/pulsar/migration-coordinator/migration`` and act on it; through the ZooKeeper front it always
reads NOT_STARTED (so Pulsar's own migration code never acts), its ``targetUrl`` says where
metashift's migration stands (what ``pulsar-admin metadata-migration status`` shows), every write
of it is refused (a ``metadata-migration start`` starts nothing), and a real node there (an
older metashift's flag) is never shown. kazoo plays Pulsar's ZooKeeper client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NodeExistsError

from metashift.coordinator import control
from metashift.migration import paths
from metashift.migration.flag import MigrationFlag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore
from tests.harness import Gateways
from tests.zkfront import Kazoos

FLAG = "/pulsar/migration-coordinator/migration"


@pytest.mark.parametrize("kind", ["zk", "etcd", "oxia"])
async def test_pip454s_flag_reads_not_started_and_refuses_every_write(
    kind: str, request: pytest.FixtureRequest, gateways: Gateways, open_stores: Any,
) -> None:
    url = str(request.getfixturevalue(f"{kind}_url"))
    store: MetadataStore = await open_stores(url)
    # an older metashift's COMPLETED flag at PIP-454's place: a 4.2 broker would go to its target
    old = MigrationFlag(Phase.COMPLETED, "oxia://127.0.0.1:1/default", 0, started_at=1, phase_since=2)
    for parent in ("/pulsar", "/pulsar/migration-coordinator", "/pulsar/migration-coordinator/participants"):
        await store.put(parent, b"")  # etcd keeps no parents: the tree as a ZooKeeper client made it
    await store.put(paths.LEGACY_FLAG, old.to_json())
    await store.put("/pulsar/migration-coordinator/participants/id-0000000007", b"")
    agent = await gateways.start(url, {"zookeeper.listen": "127.0.0.1:0", "node_id": "broker-1"})
    assert agent.zookeeper is not None
    kazoos = Kazoos(str(agent.zookeeper.address))
    try:
        await asyncio.to_thread(lambda: _reads_and_refusals(kazoos.new(), url))
    finally:
        await asyncio.to_thread(kazoos.close)
    # nothing was written: the node in the store is the one put there before
    got = await store.get(paths.LEGACY_FLAG)
    assert got is not None and MigrationFlag.from_json(got[0]).target_url == "oxia://127.0.0.1:1/default"


def _reads_and_refusals(k: KazooClient, url: str) -> None:
    value, stat = k.get(FLAG)
    flag = json.loads(value)
    assert flag["phase"] == "NOT_STARTED", flag
    assert flag["targetUrl"].startswith("metashift fronts this cluster (no migration in progress)"), flag
    assert f"metashift migrate status --source {url}" in flag["targetUrl"], flag
    assert stat.data_length == len(value) and k.exists(FLAG) is not None
    assert "migration" in k.get_children("/pulsar/migration-coordinator")
    # pulsar-admin metadata-migration start: a create-only flag in PREPARATION, then FAILED
    start = json.dumps({"phase": "PREPARATION", "targetUrl": "oxia://127.0.0.1:6648"}).encode()
    with pytest.raises(NodeExistsError):
        k.create(FLAG, start)
    with pytest.raises(NoAuthError):
        k.set(FLAG, json.dumps({"phase": "FAILED", "targetUrl": "oxia://127.0.0.1:6648"}).encode())
    with pytest.raises(NoAuthError):
        k.delete(FLAG)
    transaction = k.transaction()
    transaction.create(FLAG + "-x", b"")
    transaction.set_data(FLAG, start)
    assert any(isinstance(r, NoAuthError) for r in transaction.commit())
    assert k.exists(FLAG + "-x") is None  # all or nothing
    refused = json.loads(k.get(FLAG)[0])
    assert refused["phase"] == "NOT_STARTED"
    text = refused["targetUrl"]
    assert text.startswith("pulsar-admin metadata-migration start --target oxia://127.0.0.1:6648 was refused at ")
    assert f"use metashift migrate start --source {url} --target oxia://127.0.0.1:6648" in text, text


async def test_the_flag_says_where_metashifts_migration_stands(zk_url: str, etcd_url: str, gateways: Gateways,
                                                              open_stores: Any) -> None:
    agent = await gateways.start(zk_url, {"zookeeper.listen": "127.0.0.1:0", "node_id": "broker-1"})
    assert agent.zookeeper is not None
    source: MetadataStore = await open_stores(zk_url)
    await source.put("/admin/x", b"x")
    flag = await control.start(source, etcd_url)  # no coordinator runs here: it stays in SYNCING
    await agent.participant.step()  # the participant has read it (it also would within a second)
    kazoos = Kazoos(str(agent.zookeeper.address))
    try:
        value = json.loads((await asyncio.to_thread(lambda: kazoos.new().get(FLAG)))[0])
    finally:
        await asyncio.to_thread(kazoos.close)
    assert value["phase"] == "NOT_STARTED"  # never SYNCING: Pulsar 4.2 breaks on a phase it does not know
    assert f"migration epoch {flag.epoch} in SYNCING to {etcd_url}" in value["targetUrl"], value
