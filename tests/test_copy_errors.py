"""Bad input to the copy: a clear error, a non-zero exit, and the source untouched."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from metashift.spark.copy import copy_tree
from metashift.spark.report import SameStore
from metashift.spark.verify import verify_tree
from metashift.stores import InvalidStoreURL, Store, StoreFull, StoreUnavailable, open_store
from metashift_lab.servers import free_port
from tests.copy_support import snapshot


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


async def test_unreachable_target(source: Store, zk_url: str) -> None:
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


async def test_target_out_of_room(source: Store, zk_url: str, fresh_servers: Any, spark: Any) -> None:
    before = await snapshot(source)
    etcd = fresh_servers.etcd(quota_backend_bytes=1_500_000)
    with pytest.raises(StoreFull) as info:
        await asyncio.to_thread(copy_tree, zk_url, etcd.url, spark=spark)
    assert "space" in str(info.value)
    assert await snapshot(source) == before
    # a full etcd still serves reads: the verification compares and names what is missing
    report = await asyncio.to_thread(verify_tree, zk_url, etcd.url, spark=spark)
    assert not report.ok and report.nodes == len(before)
    assert {m.kind for m in report.mismatches} <= {"missing", "version", "counter"}


async def test_a_missing_source_chroot_is_an_error_and_is_not_created(zk_url: str, etcd_url: str) -> None:
    """A mistyped chroot must neither pass for a copy of nothing nor be written into the source."""
    missing = zk_url + "-typo"
    for command in ("copy", "verify"):
        result = await asyncio.to_thread(cli, command, "--source", missing, "--target", etcd_url)
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert "the chroot does not exist" in last and missing.rsplit("/", 1)[1] in last, result.stderr
        assert "Traceback" not in result.stderr
    server = zk_url.rsplit("/", 1)[0]
    async with await open_store(server) as root:
        assert not await root.exists("/" + missing.rsplit("/", 1)[1])


async def test_an_empty_source_is_an_error(etcd_url: str, zk_url: str) -> None:
    result = await asyncio.to_thread(cli, "copy", "--source", etcd_url + "-nothing-here", "--target", zk_url)
    assert result.returncode == 2, result.stderr
    assert "the source holds no nodes" in result.stderr and "Traceback" not in result.stderr
    async with await open_store(zk_url) as target:
        assert await target.get_children("/") == []


async def test_same_store_under_another_name_is_refused(zk_url: str) -> None:
    with pytest.raises(SameStore):
        copy_tree(zk_url, zk_url.replace("127.0.0.1", "localhost"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["copy", "--spark-master", "bogus://x"], "not a Spark master URL: 'bogus://x'"),
        (["verify", "--spark-master", "local[0]"], "not a Spark master URL: 'local[0]'"),
    ],
)
async def test_a_malformed_spark_master_is_refused_before_anything(
    source: Store, etcd_url: str, zk_url: str, args: list[str], message: str
) -> None:
    result = await asyncio.to_thread(cli, *args, "--source", zk_url, "--target", etcd_url)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"metashift: error: {message} " \
        "(local, local[N], local[*], spark://host:port, yarn, k8s://...)"
    assert "Traceback" not in result.stderr and "Exception" not in result.stderr
    async with await open_store(etcd_url) as target:
        assert await target.get_children("/") == []


@pytest.mark.parametrize("topics", ["0", "-3", "many"])
def test_generate_refuses_a_bad_topic_count(topics: str, zk_url: str) -> None:
    result = cli("generate", "--target", zk_url, "--topics", topics)
    assert result.returncode == 2
    assert "--topics" in result.stderr and "Traceback" not in result.stderr
