"""``make demo``: local ZooKeeper and etcd, and metashift's main job on them."""

from __future__ import annotations

import argparse

from metashift.agent.stores import open_store
from metashift.agent.stores.local_servers import LocalEtcd, LocalZooKeeper


async def run_demo(args: argparse.Namespace) -> int:
    with LocalZooKeeper() as zk, LocalEtcd() as etcd:
        print(f"started ZooKeeper at {zk.url} and etcd at {etcd.url}")
        for url in (zk.url, etcd.url):
            async with await open_store(url) as store:
                await store.put("/ledgers/idgen", b"")
                await store.put("/admin/clusters/demo", b'{"serviceUrl": "http://localhost:8080"}')
                seq = await store.put("/ledgers/idgen/ID-", b"", ephemeral=True, sequential=True)
                await store.put("/admin/clusters/demo", b'{"serviceUrl": "http://broker:8080"}', expected_version=0)
                got = await store.get("/admin/clusters/demo")
                assert got is not None
                print(f"{url}: sequential {seq.path}, /admin/clusters/demo version {got[1].version}: {got[0]!r}")
    return 0
