"""The etcd layout is Pulsar's own EtcdMetadataStore layout, read back with the raw etcd client.

After a migration Pulsar reads etcd directly, so the bytes under each key must be exactly what
its EtcdMetadataStore would have written: key = path, value = raw bytes, etcd version = stored
version + 1, ephemerals attached to a lease, sequential suffix = the parent's version.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aetcd
import pytest

import metashift
from metashift import MetadataStore


@pytest.fixture
async def etcd_pair(fresh_servers: Any) -> AsyncIterator[tuple[MetadataStore, aetcd.Client]]:
    server = fresh_servers.etcd()
    store = await metashift.open_store(server.url)  # no prefix: exactly Pulsar's keys
    raw = aetcd.Client(host="127.0.0.1", port=server.port)
    await raw.connect()
    yield store, raw
    await store.close()
    await raw.close()


async def test_key_value_and_version(etcd_pair: tuple[MetadataStore, aetcd.Client]) -> None:
    store, raw = etcd_pair
    value = b"\x08\x96\x01 binary \x00\xff"
    await store.put("/managed-ledgers/t/ns/persistent/topic", value, expected_version=-1)
    for i in range(4):
        stat = await store.put("/managed-ledgers/t/ns/persistent/topic", value + bytes([i]))
    assert stat.version == 4
    kv = await raw.get(b"/managed-ledgers/t/ns/persistent/topic")
    assert kv is not None
    assert kv.value == value + bytes([3])
    assert kv.version == stat.version + 1 == 5
    assert kv.lease == 0
    # no parent keys are made: Pulsar's etcd store doesn't make them either
    assert await raw.get(b"/managed-ledgers/t/ns/persistent") is None
    assert await raw.get(b"/managed-ledgers") is None


async def test_ephemerals_are_on_a_lease(etcd_pair: tuple[MetadataStore, aetcd.Client]) -> None:
    store, raw = etcd_pair
    await store.put("/loadbalance/brokers/broker-1:8080", b'{"x":1}', ephemeral=True)
    kv = await raw.get(b"/loadbalance/brokers/broker-1:8080")
    assert kv is not None and kv.lease != 0 and kv.version == 1
    info = await raw.get_lease_info(kv.lease)
    assert info.TTL > 0
    assert b"/loadbalance/brokers/broker-1:8080" in list(info.keys)
    await store.close()
    assert await raw.get(b"/loadbalance/brokers/broker-1:8080") is None


async def test_sequential_suffix_comes_from_the_parents_version(
    etcd_pair: tuple[MetadataStore, aetcd.Client],
) -> None:
    store, raw = etcd_pair
    made = [(await store.put("/ledgers/idgen/ID-", b"", sequential=True)).path for _ in range(12)]
    # Pulsar: a blind put of empty bytes on the parent; its resulting version is the suffix, undecorated
    assert made == [f"/ledgers/idgen/ID-{i}" for i in range(12)]
    parent = await raw.get(b"/ledgers/idgen")
    assert parent is not None and parent.value == b"" and parent.version == 12
    for path in made:
        kv = await raw.get(path.encode())
        assert kv is not None and kv.version == 1
    got = await store.get("/ledgers/idgen")
    assert got is not None and got[1].version == 11


async def test_children_come_from_a_prefix_range(etcd_pair: tuple[MetadataStore, aetcd.Client]) -> None:
    store, raw = etcd_pair
    await raw.put(b"/admin/policies/public/default", b"{}")
    await raw.put(b"/admin/policies/public", b"{}")
    await raw.put(b"/admin/policies/sample/ns/deeper", b"{}")
    assert await store.get_children("/admin/policies") == ["public", "sample"]
    got = await store.get("/admin/policies/public/default")
    assert got is not None and got == (got[0], got[1]) and got[1].version == 0
