"""``make demo``: local ZooKeeper and etcd, a sample Pulsar tree on ZooKeeper, the Spark copy to
etcd with verification, and its report. (Until the full migration sandbox exists.)"""

from __future__ import annotations

import argparse
import asyncio

from metashift.stores import open_store
from metashift_lab.sample_tree import generate
from metashift_lab.servers import LocalEtcd, LocalZooKeeper


async def run_demo(args: argparse.Namespace) -> int:
    from metashift.spark.copy import copy_tree
    from metashift.spark.report import make_progress

    with LocalZooKeeper() as zk, LocalEtcd() as etcd:
        print(f"started ZooKeeper at {zk.url} and etcd at {etcd.url}", flush=True)
        source = await open_store(zk.url, watch=False)
        try:
            tree = await generate(source, args.topics, seed=0)
            print(tree.text(), flush=True)
            print(f"copying {zk.url} -> {etcd.url} on Spark (local[*]), then verifying ...", flush=True)
            # the ephemerals stay alive (this session) while the copy runs: it must skip them
            report = await asyncio.to_thread(copy_tree, zk.url, etcd.url, verify=True, progress=make_progress(None))
        finally:
            await source.close()
        print(report.text(), flush=True)
        return 0 if report.verify is not None and report.verify.ok else 1
