"""A real Pulsar cluster (the stock release, a bookie and two brokers beside their agents) under
traffic: ``metashift migrate abort`` mid-way -> FAILED, Pulsar carries on on ZooKeeper with nothing
lost; a second ``start`` completes; then the operator's own ``pulsar-admin`` (from
pulsar-client-tools) works against the migrated cluster. And the release's own PIP-454 code, if it
has any, would read metashift's flag: checked."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from metashift.pulsar_cluster import PulsarCluster, PulsarNotInstalled, PulsarRelease, find_release
from metashift.pulsar_cluster.admin import pulsar_admin
from metashift.pulsar_cluster.scenario import MigrationRun, metashift_cli
from metashift.stores import open_store
from tests.harness import eventually, user_roots

pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def release() -> PulsarRelease:
    try:
        return find_release()
    except PulsarNotInstalled as e:
        pytest.skip(str(e))


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


async def _status(cluster: PulsarCluster) -> dict[str, Any]:
    code, out, err = await metashift_cli("migrate", "status", "--source", cluster.source_url, "--json", within=120)
    assert code == 0, err
    return dict(json.loads(out))


async def _zk_json(cluster: PulsarCluster, path: str) -> dict[str, Any] | None:
    store = await open_store(cluster.source_url, watch=False, create_root=False)
    try:
        got = await store.get(path)
    finally:
        await store.close()
    return None if got is None else dict(json.loads(got[0]))


async def test_abort_under_real_traffic_then_second_start_and_pulsar_admin(release: PulsarRelease) -> None:
    work = Path(tempfile.mkdtemp(prefix="ms-pulsar-abort-"))
    cluster = PulsarCluster(work, release, say=_say)
    passed = False
    try:
        await cluster.start()
        run = MigrationRun(cluster, _say)
        await run.start_workload()
        await asyncio.sleep(5)

        # ---- abort mid-way: FAILED, Pulsar carries on on ZooKeeper -----------------------------
        code, _out, err = await metashift_cli("migrate", "start", "--source", cluster.source_url,
                                              "--target", cluster.target_url)  # fmt: skip
        assert code == 0, err
        await eventually(lambda: _phase_is(cluster, "SYNCING"), within=300, what="SYNCING")
        await asyncio.sleep(2.0)  # the copy under way
        code, _out, err = await metashift_cli("migrate", "abort", "--source", cluster.source_url)
        assert code == 0, err
        status = await _status(cluster)
        assert status["phase"] == "FAILED" and status["reason"] == "aborted", status

        async def cleaned() -> bool:
            return bool((await _status(cluster)).get("target_cleaned"))

        await eventually(cleaned, within=300, what="the target emptied after FAILED")
        etcd = await open_store(cluster.target_url, watch=False, create_root=False)
        try:
            assert await user_roots(etcd) == []
        finally:
            await etcd.close()
        acknowledged = run.traffic.counts()["messages_acknowledged"]
        # metadata writes land in ZooKeeper again: a namespace policy and a new topic
        await asyncio.to_thread(run.admin.set_message_ttl, "metashift/ns-b", 4242)
        policies = await _zk_json(cluster, "/admin/policies/metashift/ns-b")
        assert policies is not None and policies["message_ttl_in_seconds"] == 4242, policies
        await asyncio.to_thread(run.admin.create_topic, "metashift/ns-b", "after-abort")
        assert await _zk_json(cluster, "/admin/policies/metashift/ns-a") is not None
        await eventually(lambda: run.traffic.counts()["messages_acknowledged"] > acknowledged + 50, within=120,
                         what="messages acknowledged after FAILED")  # fmt: skip

        # ---- a second start completes under the same traffic ------------------------------------
        code = await run.migrate(change_topics=True)
        assert code == 0 and run.phase == "COMPLETED", (code, run.phase, run.reason)
        assert (await _status(cluster))["epoch"] == 2
        await run.finish_traffic(10.0)
        await run.read_evidence()
        f = run.figures
        assert f.messages_acknowledged > 500 and f.messages_lost == 0, f
        assert f.messages_received == f.messages_acknowledged, f
        assert f.ledger_ids_reused == 0, f.ledger_ids
        assert f.troubles == [], f.troubles

        # ---- pulsar-admin against the migrated cluster (its brokers now served from etcd) ---------
        web = cluster.web_urls[1]

        def admin(*args: str) -> str:
            done = pulsar_admin(release, web, list(args), work)
            assert done.returncode == 0, (args, done.stdout, done.stderr[-3000:])
            return done.stdout

        assert "metashift" in admin("tenants", "list").split()
        assert set(admin("namespaces", "list", "metashift").split()) == {"metashift/ns-a", "metashift/ns-b"}
        topics = admin("topics", "list", "metashift/ns-a").split()
        assert {"persistent://metashift/ns-a/events", "persistent://metashift/ns-a/created-during"} <= set(topics)
        assert "persistent://metashift/ns-a/orders" in admin("topics", "list-partitioned-topics", "metashift/ns-a")
        assert json.loads(admin("topics", "get-partitioned-topic-metadata",
                                "persistent://metashift/ns-a/orders"))["partitions"] == 3  # fmt: skip
        assert "4242" in admin("namespaces", "get-message-ttl", "metashift/ns-b")
        admin("namespaces", "set-retention", "metashift/ns-b", "--size", "10M", "--time", "2h")
        assert json.loads(admin("namespaces", "get-retention", "metashift/ns-b"))["retentionTimeInMinutes"] == 120
        stats = json.loads(admin("topics", "stats", "persistent://metashift/ns-a/events"))
        assert {"sub", "backlog"} <= set(stats["subscriptions"]), stats
        admin("topics", "create", "persistent://metashift/ns-b/made-by-pulsar-admin")
        assert len(admin("brokers", "list", "metashift").split()) == 2
        etcd = await open_store(cluster.target_url, watch=False, create_root=False)
        try:
            # what pulsar-admin changed lives in etcd now
            got = await etcd.get("/admin/policies/metashift/ns-b")
            assert got is not None and json.loads(got[0])["retention_policies"]["retentionTimeInMinutes"] == 120
            assert await etcd.get("/managed-ledgers/metashift/ns-b/persistent/made-by-pulsar-admin") is not None
        finally:
            await etcd.close()
        passed = True
    finally:
        # a failure keeps the logs (the processes go in any case)
        await cluster.cleanup(keep=not passed)
        if passed:
            shutil.rmtree(work, ignore_errors=True)
        else:
            _say(f"kept {work}")


async def _phase_is(cluster: PulsarCluster, phase: str) -> bool:
    flag = await _zk_json(cluster, "/pulsar/migration-coordinator/migration")
    return flag is not None and flag.get("phase") == phase


def test_release_ships_no_pip454_migration_code(release: PulsarRelease) -> None:
    """Pulsar's own PIP-454 code (``DualMetadataStore``, which 4.2 wraps around every ``zk:`` store,
    and ``MigrationCoordinator``) reads and writes ``/pulsar/migration-coordinator/migration`` and
    registers its own participants there: a release that ships it would act on metashift's flag.
    The pinned release must not (README, "A real Pulsar cluster")."""
    jars = list(release.lib.glob("pulsar-metadata-*.jar"))
    assert jars, release.lib
    with zipfile.ZipFile(jars[0]) as jar:
        names = jar.namelist()
    assert "org/apache/pulsar/metadata/impl/ZKMetadataStore.class" in names
    pip454 = [n for n in names if n.endswith(("/DualMetadataStore.class", "/MigrationCoordinator.class"))]
    assert pip454 == [], f"{jars[0].name} ships PIP-454's migration code: {pip454}"
