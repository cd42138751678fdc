"""etcd's single operations and the txns that carry a batch, in Pulsar's ``EtcdMetadataStore``
layout:

- ``Stat.version`` = etcd's per-key ``version`` - 1; no timestamps (0); ``ephemeral`` = the key
  has a lease, ``created_by_self`` = the lease is this store's. A put returns ``Stat.version`` =
  the previous kv's version (0 when the key was new), which is the new stored version - 1, and
  ``created_by_self=True`` as Pulsar does.
- put with ``expected_version`` -1: txn ``create_revision == 0``; ``n``: txn ``version == n+1``
  (also fails when the key is missing: ``BadVersion``); ``None``: a blind put.
- sequential puts (Pulsar's surprising rule, kept on purpose): first a *blind put of empty bytes*
  on the parent key (``paths.parent(path)``, ``/`` at top level) — which creates the parent key
  if it is missing and wipes its value if it had one — and the version of the previous kv it
  returns (0 when the parent key did not exist) is appended to ``path`` as a plain decimal, no
  zero padding: ``/ledgers/idgen/ID-`` → ``/ledgers/idgen/ID-17``. Then the real put.
- children = a keys-only prefix range on ``path + "/"``; the first segment after the prefix,
  deduplicated. A node can be deleted while it has "children" (there is no real tree), and
  parents are never created automatically.
"""

from __future__ import annotations

import logging
from typing import Any

from aetcd import rpc

from .. import paths
from ..batching import is_write, op_size
from ..errors import AlreadyExists, AuthFailed, BadVersion, MetadataStoreError, NotFound, StoreUnavailable
from ..ops import DeleteOp, ExistsOp, GetChildrenOp, GetOp, GetResult, Op, OpResult, PutOp
from ..stat import Stat
from .connection import EtcdConnection
from .keys import Keys, prefix_end
from .lease import SessionLease
from .node_reads import NodeReads

log = logging.getLogger(__name__)

#: etcd's default ``--max-request-bytes`` (1.5 MiB).
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
#: Largest value we accept: a put of exactly this many bytes fits in a default server's request
#: limit with 16 KiB left for the key and the request's framing.
MAX_VALUE_SIZE = ETCD_MAX_REQUEST_BYTES - 16 * 1024
#: etcd's default ``--max-txn-ops``.
TXN_MAX_OPS = 128
#: Budget of one batch txn (keys + values + framing), under the server's request limit.
TXN_MAX_BYTES = MAX_VALUE_SIZE
#: Keys per page when listing children.
CHILDREN_PAGE = 10_000


def compare(key: bytes, expected_version: int) -> Any:
    """The txn compare of a put or delete conditional on ``expected_version``."""
    if expected_version == -1:
        return rpc.Compare(key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.CREATE, create_revision=0)
    return rpc.Compare(key=key, result=rpc.Compare.EQUAL, target=rpc.Compare.VERSION, version=expected_version + 1)


def put_stat(path: str, put_response: Any, ephemeral: bool, lease: int = 0) -> Stat:
    """The Stat of a put, Pulsar's way: version = prevKv.version, 0 without one; createdBySelf.
    ``lease``: the session lease an ephemeral was put on (its owner)."""
    version = put_response.prev_kv.version if put_response.HasField("prev_kv") else 0
    return Stat(path, int(version), 0, 0, ephemeral=ephemeral, created_by_self=True, owner=lease if ephemeral else 0)


def child_names(prefix: bytes, kvs: Any) -> list[str]:
    """The sorted names of the children among the keys of a prefix range on ``prefix``."""
    names = set()
    for kv in kvs:
        name = kv.key[len(prefix) :].split(b"/", 1)[0]
        if name:
            names.add(name.decode(errors="replace"))
    return sorted(names)


class Operations:
    """The etcd store's single operations (get, exists, children, node, put, delete) and the
    txn of a batch, on its connection and session lease."""

    def __init__(self, conn: EtcdConnection, keys: Keys, lease: SessionLease) -> None:
        self._conn = conn
        self._keys = keys
        self._lease = lease
        self._node_reads = NodeReads(conn, CHILDREN_PAGE)

    def stat(self, path: str, kv: Any) -> Stat:
        """The store's ``Stat`` of a key's kv, Pulsar's way (version - 1, the lease its owner)."""
        owned = kv.lease != 0 and kv.lease == self._lease.id
        return Stat(path, kv.version - 1, 0, 0, ephemeral=kv.lease != 0, created_by_self=owned, owner=kv.lease)

    # ---- reads ----------------------------------------------------------------------------------

    async def get(self, path: str) -> GetResult:
        resp = await self._conn.range(path, rpc.RangeRequest(key=self._keys.key(path)))
        if not resp.kvs:
            return None
        kv = resp.kvs[0]
        return bytes(kv.value), self.stat(path, kv)

    async def exists(self, path: str) -> bool:
        resp = await self._conn.range(path, rpc.RangeRequest(key=self._keys.key(path), count_only=True))
        return bool(resp.count > 0)

    async def get_children(self, path: str) -> list[str]:
        """Keys-only prefix range on ``path/``, paged at one pinned revision; the first segment of
        each key after the prefix, deduplicated. Pages skip the subtree of the last child seen."""
        prefix = self._keys.children_prefix(path)
        end = prefix_end(prefix)
        start = prefix
        revision = 0
        names: set[str] = set()
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, keys_only=True, limit=CHILDREN_PAGE, revision=revision)
            resp = await self._conn.range(path, req)
            if not revision:
                revision = resp.header.revision
            if not resp.kvs:
                break
            for kv in resp.kvs:
                name = kv.key[len(prefix) :].split(b"/", 1)[0]
                if name:  # the key of the parent "/" itself, when there is no prefix
                    names.add(name.decode(errors="replace"))
            if not resp.more:
                break
            last = resp.kvs[-1].key
            rest = last[len(prefix) :]
            if b"/" in rest:  # skip the rest of that child's subtree: "name/" < ... < "name0"
                start = prefix + rest.split(b"/", 1)[0] + b"0"
            else:
                start = last + b"\x00"
        return sorted(names)

    async def get_node(self, path: str) -> tuple[bytes, Stat, list[str]] | None:
        """The value, Stat and children of ``path`` in one txn (a range of the key and a keys-only
        range of its children), shared with the other nodes read in this turn of the event loop
        (``node_reads``); a listing past one page is finished by ``get_children``. ``path`` is
        checked (``paths.validate``)."""
        prefix = self._keys.children_prefix(path)
        key_range, listing = await self._node_reads.read(path, self._keys.key(path), prefix)
        if not key_range.kvs:
            return None
        kv = key_range.kvs[0]
        kids = await self.get_children(path) if listing.more else child_names(prefix, listing.kvs)
        return bytes(kv.value), self.stat(path, kv), kids

    # ---- writes ---------------------------------------------------------------------------------

    async def put(
        self, path: str, value: bytes, expected_version: int | None, ephemeral: bool, sequential: bool
    ) -> Stat:
        if sequential:
            # Pulsar: a blind put of empty bytes on the parent; its previous version is the suffix
            parent = paths.parent(path) or paths.SEPARATOR
            counter = await self._put_one(parent, b"", None, False)
            path = path + str(counter.version)
        return await self._put_one(path, value, expected_version, ephemeral)

    async def _put_one(self, path: str, value: bytes, expected_version: int | None, ephemeral: bool) -> Stat:
        key = self._keys.key(path)
        lease = self._lease.require(path) if ephemeral else 0
        put = rpc.PutRequest(key=key, value=value, lease=lease, prev_kv=True)
        if expected_version is None:
            return put_stat(path, await self._conn.put(path, put), ephemeral, lease)
        txn = rpc.TxnRequest(
            compare=[compare(key, expected_version)], success=[rpc.RequestOp(request_put=put)], failure=[]
        )
        resp = await self._conn.txn(path, txn)
        if not resp.succeeded:
            raise AlreadyExists(path) if expected_version == -1 else BadVersion(path)
        return put_stat(path, resp.responses[0].response_put, ephemeral, lease)

    async def delete(self, path: str, expected_version: int | None) -> None:
        key = self._keys.key(path)
        if expected_version is None:
            resp = await self._conn.delete_range(path, rpc.DeleteRangeRequest(key=key))
            if resp.deleted == 0:
                raise NotFound(path)
            return
        txn = rpc.TxnRequest(
            compare=[compare(key, expected_version)],
            success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))],
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=key, count_only=True))],
        )
        resp = await self._conn.txn(path, txn)
        if not resp.succeeded:
            if resp.responses[0].response_range.count == 0:
                raise NotFound(path)
            raise BadVersion(path)

    # ---- batches --------------------------------------------------------------------------------
    # Plain puts and deletes go in txns, gets and exists in read-only txns, with Pulsar's fallback
    # to single calls when a txn fails (a compare failed, too large); children listings and
    # sequential puts run as pipelined single calls.

    def batch_kind(self, op: Op) -> str | None:
        """Which ops share a txn (``BatchedStore._batch_kind``)."""
        if isinstance(op, GetChildrenOp) or (isinstance(op, PutOp) and op.sequential):
            return None
        return "write" if is_write(op) else "read"

    def batch_size(self, op: Op) -> int:
        """The bytes ``op`` takes in a txn."""
        return op_size(op, len(self._keys.key(op.path)))

    async def send_batch(self, ops: list[Op]) -> list[OpResult] | None:
        """``ops`` in one txn (``BatchedStore._send_batch``); None when it failed as a whole."""
        compares = []
        success = []
        try:
            for op in ops:
                key = self._keys.key(op.path)
                if isinstance(op, GetOp):
                    success.append(rpc.RequestOp(request_range=rpc.RangeRequest(key=key)))
                elif isinstance(op, ExistsOp):
                    success.append(rpc.RequestOp(request_range=rpc.RangeRequest(key=key, count_only=True)))
                elif isinstance(op, PutOp):
                    if op.expected_version is not None:
                        compares.append(compare(key, op.expected_version))
                    lease = self._lease.require(op.path) if op.ephemeral else 0
                    put = rpc.PutRequest(key=key, value=op.value, lease=lease, prev_kv=True)
                    success.append(rpc.RequestOp(request_put=put))
                else:
                    assert isinstance(op, DeleteOp)
                    if op.expected_version is not None:
                        compares.append(compare(key, op.expected_version))
                    success.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key)))
            resp = await self._conn.txn(None, rpc.TxnRequest(compare=compares, success=success, failure=[]))
        except (StoreUnavailable, AuthFailed):
            raise  # a write txn may or may not have been applied: reported, not retried
        except MetadataStoreError as e:  # request or response too large, ...
            log.debug("%s: batch txn failed (%s); running its %d ops one by one", self._conn.url, e, len(ops))
            return None
        if not resp.succeeded:
            return None
        results: list[OpResult] = []
        for op, r in zip(ops, resp.responses, strict=True):
            if isinstance(op, GetOp):
                kvs = r.response_range.kvs
                results.append((bytes(kvs[0].value), self.stat(op.path, kvs[0])) if kvs else None)
            elif isinstance(op, ExistsOp):
                results.append(r.response_range.count > 0)
            elif isinstance(op, PutOp):
                results.append(put_stat(op.path, r.response_put, op.ephemeral, self._lease.id))
            else:
                results.append(NotFound(op.path) if r.response_delete_range.deleted == 0 else None)
        return results
