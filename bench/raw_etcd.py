"""The raw etcd floor of the agent benchmarks: etcd's KV service called directly, one request per
operation, in Pulsar's own ``EtcdMetadataStore`` txn pattern."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from aetcd import rpc

from bench.floors import VALUE, Call, CallPath


class RawEtcd:
    """etcd's KV service called directly, one request per operation, the way Pulsar's
    ``EtcdMetadataStore`` shapes it: a get is a Range of the key; a put is a Txn with the compare
    of its expected version (``create_revision == 0`` for a create, ``version == v + 1`` for a
    compare-and-set, none for a blind put) and a Put with ``prev_kv``."""

    def __init__(self, endpoint: str, prefix: str) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint.split("://", 1)[-1])
        self.kv = rpc.KVStub(self.channel)
        self.prefix = prefix

    def key(self, path: str) -> bytes:
        return (self.prefix + path).encode()

    async def get(self, path: str) -> Any:
        resp = await self.kv.Range(rpc.RangeRequest(key=self.key(path)))
        return resp.kvs[0] if resp.kvs else None

    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> int:
        key = self.key(path)
        compares = []
        if expected_version == -1:
            compares.append(rpc.Compare(key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.CREATE,
                                        create_revision=0))
        elif expected_version is not None:
            compares.append(rpc.Compare(key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.VERSION,
                                        version=expected_version + 1))
        put = rpc.PutRequest(key=key, value=value, prev_kv=True)
        resp = await self.kv.Txn(rpc.TxnRequest(compare=compares, success=[rpc.RequestOp(request_put=put)],
                                                failure=[]))
        if not resp.succeeded:
            raise RuntimeError(f"compare failed on {path}")
        r = resp.responses[0].response_put
        return int(r.prev_kv.version) if r.HasField("prev_kv") else 0

    async def close(self) -> None:
        await self.channel.close()


async def raw_etcd_path(endpoint: str, base: str, keys: int, put: str) -> tuple[CallPath, RawEtcd]:
    """The raw etcd floor as a path (``put``: what the benchmark calls a blind put), its ``keys``
    keys written; the caller closes the ``RawEtcd``."""
    etcd = RawEtcd(endpoint, "/raw-floor")
    await etcd.put(f"{base}/node", VALUE)
    await asyncio.gather(*(etcd.put(f"{base}/k{k}", VALUE) for k in range(keys)))
    calls: dict[str, tuple[Call, Call]] = {
        "get": (lambda i: etcd.get(f"{base}/node"), lambda i: etcd.get(f"{base}/k{i % keys}")),
        put: (lambda i: etcd.put(f"{base}/node", VALUE), lambda i: etcd.put(f"{base}/k{i % keys}", VALUE)),
        "create": (lambda i: etcd.put(f"{base}/c{i}", VALUE, -1), lambda i: etcd.put(f"{base}/p{i}", VALUE, -1)),
    }
    return CallPath("etcd raw (Pulsar txns)", calls), etcd
