"""ZooKeeper's tree writes on etcd, a run of them in one txn (``stores.tree_writes``).

Each write brings its compares: a create, ``create_revision == 0`` on its key and, below the
root, ``create_revision > 0`` and ``lease == 0`` on its parent's; a setData or delete,
``create_revision > 0`` on its key and its version when one is expected; a delete also
``create_revision == 0`` over the range of its children's keys (true only when there is none).
One txn holds as many as etcd's ``--max-txn-ops`` and request size allow; a txn whose compares
fail writes nothing, and the run stops there."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aetcd import rpc

from .. import paths
from ..errors import BadVersion, MetadataStoreError, NotFound
from ..stat import Stat
from ..tree_writes import CreateNode, DeleteNode, SetNode, TreeResult, TreeWrite, parent_of
from .connection import EtcdConnection
from .keys import Keys, prefix_end
from .lease import SessionLease
from .operations import CHILDREN_PAGE, TXN_MAX_BYTES, Operations, child_names, compare

#: Writes per txn: at most three compares and two operations each, under etcd's default of 128.
RUN_MAX_OPS = 40
#: A txn's framing per write, beside its key and value bytes.
_WRITE_OVERHEAD = 64


def _created(key: bytes, target: Any, result: Any, revision: int = 0) -> Any:
    return rpc.Compare(key=key, result=result, target=target, create_revision=revision)


class TreeWrites:
    """``tree_writes`` and ``set_data`` of the etcd store: ZooKeeper's writes, a run of them in
    as few txns as fit."""

    def __init__(
        self,
        conn: EtcdConnection,
        keys: Keys,
        lease: SessionLease,
        operations: Operations,
        check_put: Callable[[str, bytes, int | None], None],
        check_delete: Callable[[str, int | None], None],
    ) -> None:
        self._conn = conn
        self._keys = keys
        self._lease = lease
        self._operations = operations
        # the store's checks of a put and a delete (``MetadataStore``): a write it would refuse
        # alone ends a run, so that the caller runs it alone and learns why
        self._check_put = check_put
        self._check_delete = check_delete

    async def tree_writes(self, ops: Sequence[TreeWrite]) -> list[TreeResult]:
        """``MetadataStore.tree_writes``: runs of writes, each in one txn."""
        results: list[TreeResult] = []
        start = 0
        while start < len(ops):
            txn, end = self._tree_txn(ops, start)
            if end == start:
                break  # the store refuses ops[start]: the caller runs it alone and learns why
            resp = await self._conn.txn(ops[start].path, txn)
            if not resp.succeeded:
                break
            results.extend(await self._tree_results(ops[start:end], resp.responses))
            start = end
        return results

    async def set_data(self, path: str, value: bytes, expected_version: int | None = None) -> tuple[Stat, int]:
        """ZooKeeper's setData in one txn: the key exists (and is at ``expected_version``), then a
        put that keeps its lease (``ignore_lease``) and a keys-only range of its children."""
        op = SetNode(path, value, expected_version)
        compares, success = self._tree_op(op)
        key = self._keys.key(path)
        failure = [rpc.RequestOp(request_range=rpc.RangeRequest(key=key, count_only=True))]
        resp = await self._conn.txn(path, rpc.TxnRequest(compare=compares, success=success, failure=failure))
        if not resp.succeeded:
            if resp.responses[0].response_range.count == 0:
                raise NotFound(path)
            raise BadVersion(path)
        result = (await self._tree_results([op], resp.responses))[0]
        assert isinstance(result, tuple)
        return result

    def _tree_txn(self, ops: Sequence[TreeWrite], start: int) -> tuple[Any, int]:
        """The txn of ``ops[start:end]``: as many as fit, stopping before one the store refuses."""
        compares: list[Any] = []
        success: list[Any] = []
        size = 0
        end = start
        while end < len(ops) and end - start < RUN_MAX_OPS:
            op = ops[end]
            try:
                cmp, req = self._tree_op(op)
            except (MetadataStoreError, ValueError, TypeError):
                break
            size += sum(len(c.key) for c in cmp) + sum(r.ByteSize() for r in req) + _WRITE_OVERHEAD
            if end > start and size > TXN_MAX_BYTES:
                break
            compares.extend(cmp)
            success.extend(req)
            end += 1
        return rpc.TxnRequest(compare=compares, success=success, failure=[]), end

    def _tree_op(self, op: TreeWrite) -> tuple[list[Any], list[Any]]:
        """The compares and requests of one write (checked as the single calls check them)."""
        key = self._keys.key(op.path)
        if isinstance(op, CreateNode):
            self._check_put(op.path, op.value, -1)
            compares = [_created(key, rpc.Compare.CREATE, rpc.Compare.EQUAL)]
            parent = parent_of(op.path)
            if parent != paths.SEPARATOR:
                pkey = self._keys.key(parent)
                compares.append(_created(pkey, rpc.Compare.CREATE, rpc.Compare.GREATER))
                compares.append(rpc.Compare(key=pkey, result=rpc.Compare.EQUAL, target=rpc.Compare.LEASE, lease=0))
            lease = self._lease.require(op.path) if op.ephemeral else 0
            return compares, [rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=op.value, lease=lease))]
        compares = [_created(key, rpc.Compare.CREATE, rpc.Compare.GREATER)]
        if op.expected_version is not None:
            compares.append(compare(key, op.expected_version))
        prefix = self._keys.children_prefix(op.path)
        if isinstance(op, SetNode):
            self._check_put(op.path, op.value, op.expected_version)
            return compares, [
                rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=op.value, ignore_lease=True, prev_kv=True)),
                rpc.RequestOp(request_range=rpc.RangeRequest(
                    key=prefix, range_end=prefix_end(prefix), keys_only=True, limit=CHILDREN_PAGE)),
            ]
        assert isinstance(op, DeleteNode)
        self._check_delete(op.path, op.expected_version)
        compares.append(rpc.Compare(key=prefix, range_end=prefix_end(prefix), result=rpc.Compare.EQUAL,
                                    target=rpc.Compare.CREATE, create_revision=0))
        return compares, [rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))]

    async def _tree_results(self, ops: Sequence[TreeWrite], responses: Any) -> list[TreeResult]:
        results: list[TreeResult] = []
        i = 0
        for op in ops:
            if isinstance(op, CreateNode):
                results.append(Stat(op.path, 0, 0, 0, ephemeral=op.ephemeral, created_by_self=True,
                                    owner=self._lease.id if op.ephemeral else 0))
                i += 1
            elif isinstance(op, SetNode):
                prev = responses[i].response_put.prev_kv
                stat = Stat(op.path, int(prev.version), 0, 0, ephemeral=prev.lease != 0,
                            created_by_self=prev.lease != 0 and prev.lease == self._lease.id, owner=prev.lease)
                listing = responses[i + 1].response_range
                prefix = self._keys.children_prefix(op.path)
                if listing.more:  # past one page: listed in full
                    count = len(await self._operations.get_children(op.path))
                else:
                    count = len(child_names(prefix, listing.kvs))
                results.append((stat, count))
                i += 2
            else:
                results.append(None)
                i += 1
        return results
