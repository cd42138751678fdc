"""Bad input to the copy: a clear error, a non-zero exit, and the source untouched."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from metashift.agent.stores import InvalidStoreURL, MetadataStore, StoreFull, StoreUnavailable, open_store
from metashift.agent.stores.local_servers import free_port
from metashift.spark.copy import copy_tree
from metashift.spark.report import SameStore
from tests.test_copy import snapshot, spark  # noqa: F401  (the session's Spark fixture)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metashift.cli", *args], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


@pytest.fixture
async def source(zk_url: str) -> Any:
    store = await open_store(zk_url)
    await store.restore("/admin/clusters/c1", b'{"serviceUrl":"http://b:8080"}', 2)
    await store.restore("/managed-ledgers/t/ns/persistent/big", os.urandom(200_000), 3)
    for i in range(40):
        await store.restore(f"/managed-ledgers/t/ns/persistent/big/cursor-{i}", os.urandom(60_000), 1)
    yield store
    await store.close()


async def test_malformed_url_is_refused_before_anything(zk_url: str) -> None:
    with pytest.raises(InvalidStoreURL):
        copy_tree(zk_url, "etcd//127.0.0.1:2379")
    result = await asyncio.to_thread(cli, "copy", "--source", "zk://127.0.0.1:notaport", "--target", zk_url)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("metashift: error: bad port")
    assert "Traceback" not in result.stderr


async def test_same_store_is_refused(zk_url: str) -> None:
    with pytest.raises(SameStore):
        copy_tree(zk_url, zk_url + "/inside")


async def test_unreachable_target(source: MetadataStore, zk_url: str) -> None:
    before = await snapshot(source)
    dead = f"etcd://127.0.0.1:{free_port()}?timeout=2"
    result = await asyncio.to_thread(cli, "copy", "--source", zk_url, "--target", dead)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("metashift: error:") and "127.0.0.1" in last, result.stderr
    assert "Traceback" not in result.stderr
    assert await snapshot(source) == before


async def test_unreachable_source(etcd_url: str) -> None:
    dead = f"zk://127.0.0.1:{free_port()}?timeout=2"
    with pytest.raises(StoreUnavailable):
        await asyncio.to_thread(copy_tree, dead, etcd_url)
    result = await asyncio.to_thread(cli, "verify", "--source", dead, "--target", etcd_url)
    assert result.returncode == 2 and "metashift: error:" in result.stderr and "Traceback" not in result.stderr
    async with await open_store(etcd_url) as target:
        assert await target.get_children("/") == []


async def test_target_out_of_room(source: MetadataStore, zk_url: str, fresh_servers: Any, spark: Any) -> None:  # noqa: F811
    before = await snapshot(source)
    etcd = fresh_servers.etcd(quota_backend_bytes=1_500_000)
    with pytest.raises(StoreFull) as info:
        await asyncio.to_thread(copy_tree, zk_url, etcd.url, spark=spark)
    assert "space" in str(info.value)
    assert await snapshot(source) == before
