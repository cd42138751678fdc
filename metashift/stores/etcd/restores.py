"""The etcd store's bulk operations (the copy, its verification, sample data): a walk by range
scans, restores and counter moves in many txns in flight, history compaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aetcd import rpc

from .. import paths
from ..batching import OP_OVERHEAD, pack
from ..bulk import BulkStore, NodeInfo, NodeRead, Restore
from ..errors import BadVersion, MetadataStoreError, ValueTooLarge
from .keys import prefix_end
from .operations import TXN_MAX_BYTES, TXN_MAX_OPS, EtcdOperations, compare
from .repeat import Chain, repeat_puts

#: Keys per page of ``walk`` (values included). etcd 3.4 walks the whole rest of the range for every
#: limited page, so few large pages beat many small ones (200k keys: 1.3 s at 10k, 3.4 s at 1k).
WALK_PAGE_KEYS = 10_000
#: Steps of a sequence counter between two compactions of the history (~50 MB of it).
COMPACT_EVERY_STEPS = 1_000_000
#: Txns a bulk write keeps in flight; the final puts of a restore.
_BULK_TXNS_IN_FLIGHT = 32
_FINAL_TXNS_IN_FLIGHT = 8


def _below(prune: set[str]) -> tuple[str, ...]:
    """The prefixes of the paths below the roots of ``prune`` (for one ``str.startswith``)."""
    return tuple(r if r == paths.SEPARATOR else r + paths.SEPARATOR for r in prune)


def _pruned(path: str, prune: set[str], below: tuple[str, ...]) -> bool:
    return path in prune or path.startswith(below)


def _at_depth(path: str, depth: int) -> str:
    """The ancestor of ``path`` with ``depth`` separators (``path`` itself when not deeper)."""
    cut = -1
    for _ in range(depth + 1):
        cut = path.find(paths.SEPARATOR, cut + 1)
        if cut < 0:
            return path
    return path[:cut]


class _TxnTooBig(Exception):
    """The server refused a txn for its number of operations or its size."""


class EtcdBulk(EtcdOperations, BulkStore):
    """The ``BulkStore`` operations of the etcd store."""

    # txn budgets of the bulk operations; they shrink when the server's limits are lower
    _txn_ops: int = TXN_MAX_OPS
    _txn_bytes: int = TXN_MAX_BYTES

    async def _walk(self, root: str, prune: set[str]) -> AsyncIterator[list[NodeInfo]]:
        """One range scan over the keys below ``root``, paged, at one pinned revision; key
        order puts every parent before its children."""
        prefix = self._keys.children_prefix(root)
        end = prefix_end(prefix)
        pruned = _below(prune)
        start = prefix
        revision = 0
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, limit=WALK_PAGE_KEYS, revision=revision)
            resp = await self._conn.range(root, req)
            if not revision:
                revision = resp.header.revision
            page = []
            for kv in resp.kvs:
                path = self._keys.path_of(kv.key)
                if path is None or path == paths.SEPARATOR or (pruned and _pruned(path, prune, pruned)):
                    continue
                page.append(NodeInfo(path, kv.version - 1, len(kv.value), kv.lease != 0, kv.lease, kv.mod_revision))
            if page:
                yield page
            if not resp.more or not resp.kvs:
                return
            start = resp.kvs[-1].key + b"\x00"

    async def _read_trees(self, roots: list[str], prune: set[str]) -> AsyncIterator[list[NodeRead]]:
        """One range scan from the first root's key to the end of the last subtree, at
        one pinned revision, keeping the keys that are a root or under one (sorted sibling
        roots leave little else in between); then in pages by depth."""
        if not roots:
            return
        wanted = set(roots)
        pruned = _below(prune)
        # a path is kept when its ancestor at a root's depth (or itself) is a root
        depths = sorted({r.count(paths.SEPARATOR) for r in roots})
        everything = paths.SEPARATOR in wanted  # "/" has no depth of its own: it holds every path
        start = self._keys.key(roots[0])
        # not the last root's end: "/a-x/" sorts before "/a/", so "/a"'s subtree may end later
        end = max(prefix_end(self._keys.children_prefix(r)) for r in roots)
        revision = 0
        found: list[NodeRead] = []
        while True:
            req = rpc.RangeRequest(key=start, range_end=end, limit=WALK_PAGE_KEYS, revision=revision)
            resp = await self._conn.range(roots[0], req)
            if not revision:
                revision = resp.header.revision
            for kv in resp.kvs:
                path = self._keys.path_of(kv.key)
                if path is None or path == paths.SEPARATOR or (pruned and _pruned(path, prune, pruned)):
                    continue
                if everything or path in wanted or any(_at_depth(path, d) in wanted for d in depths):
                    found.append(NodeRead(path, kv.value, kv.version - 1, kv.lease != 0))
            if not resp.more or not resp.kvs:
                break
            start = resp.kvs[-1].key + b"\x00"
        found.sort(key=lambda n: (n.path.count(paths.SEPARATOR), n.path))
        for i in range(0, len(found), WALK_PAGE_KEYS):
            yield found[i : i + WALK_PAGE_KEYS]

    async def history_bytes(self) -> int | None:
        """The backend's bytes in use, as the member we talk to reports it (etcd 3.4+; the whole
        backend file on older servers). Not the revision: a revision is one txn, of up to 128
        writes, so revisions say little about the history a bulk write leaves."""
        conn = self._conn
        request = rpc.StatusRequest()
        resp = await conn.call(None, lambda md: conn.maintenance.Status(request, timeout=conn.timeout, metadata=md))
        return int(resp.dbSizeInUse or resp.dbSize)

    async def _restore_many(self, items: Sequence[Restore]) -> list[int | MetadataStoreError]:
        """Keeping version V takes V+1 puts of the key, each in its own txn (etcd refuses a key
        twice in one txn). The intermediate puts are blind puts of empty bytes, and since only
        their number matters they go in parallel: packed so that every txn holds distinct keys
        and stays within the server's op and size limits (learnt when the server refuses a
        txn: the budgets shrink and the txn is split). Then one final put per node with its
        value, conditional on the version the intermediate puts must have left, so a count gone
        wrong is a ``BadVersion``, never a wrong version. A final txn whose compare fails is
        redone key by key to find the culprits."""
        results: list[int | MetadataStoreError] = [0] * len(items)
        todo = [i for i, item in enumerate(items) if item.current < item.version]
        if not todo:
            return results
        keys = {i: self._keys.key(items[i].path) for i in todo}
        # -- intermediate puts: key i needs (version - current - 1) of them, in distinct txns
        need = {i: items[i].version - items[i].current - 1 for i in todo}
        failed: dict[int, MetadataStoreError] = {}
        await self._blind_puts([(keys[i], b"", n, i) for i, n in need.items() if n > 0], failed)
        # -- final puts, with the value, conditional on the version left by the puts before
        finals = [i for i in todo if i not in failed]

        def final_put(i: int) -> tuple[Any, Any]:
            item = items[i]
            put = rpc.RequestOp(request_put=rpc.PutRequest(key=keys[i], value=item.value))
            return compare(keys[i], item.version - 1), put

        sizes = [(1, len(keys[i]) + len(items[i].value) + OP_OVERHEAD) for i in finals]
        chunks = [[finals[k] for k in group] for group in pack(sizes, self._txn_ops, self._txn_bytes)]
        sem = asyncio.Semaphore(_FINAL_TXNS_IN_FLIGHT)

        async def run_final(chunk: list[int]) -> None:
            ops = [final_put(i) for i in chunk]
            request = rpc.TxnRequest(compare=[c for c, _ in ops], success=[p for _, p in ops], failure=[])
            async with sem:
                try:
                    resp = await self._txn(request)
                    too_big = False
                except _TxnTooBig:
                    too_big = True
                except MetadataStoreError as e:  # unavailable, full, ...: whether applied is unknown
                    for i in chunk:
                        failed[i] = e
                    return
            if not too_big and resp.succeeded:
                return
            if len(chunk) == 1:
                item = items[chunk[0]]
                failed[chunk[0]] = (
                    ValueTooLarge(item.path, len(item.value), self._txn_bytes)
                    if too_big
                    else BadVersion(item.path, "its version moved while it was restored")
                )
                return
            if too_big:
                half = len(chunk) // 2
                await asyncio.gather(run_final(chunk[:half]), run_final(chunk[half:]))
            else:  # a compare failed: find which, key by key
                await asyncio.gather(*(run_final([i]) for i in chunk))

        await asyncio.gather(*(run_final(chunk) for chunk in chunks))
        for i in todo:
            results[i] = failed[i] if i in failed else items[i].version - items[i].current
        return results

    async def position_of(self, path: str) -> int | None:
        """The key's mod_revision: the revision that last wrote it."""
        resp = await self._conn.range(path, rpc.RangeRequest(key=self._keys.key(paths.validate(path))))
        return int(resp.kvs[0].mod_revision) if resp.kvs else None

    async def children_version(self, path: str) -> int | None:
        """The stored etcd version of the key of ``path``: the counter behind sequential children of
        ``path`` (the next sequential put under ``path`` gets this number as its suffix, 0 when
        ``None``, the key being absent). For the bulk copy, to carry counters over."""
        resp = await self._conn.range(path, rpc.RangeRequest(key=self._keys.key(paths.validate(path))))
        return int(resp.kvs[0].version) if resp.kvs else None

    async def advance_sequence_counter(self, parent: str, at_least: int) -> int:
        return await self.advance_sequence_counters({parent: at_least})

    async def advance_sequence_counters(self, wanted: dict[str, int]) -> int:
        """Each counter is its parent key's version: blind puts of the key's own value (their
        order does not matter, all write the same bytes), one request per step and many in
        flight, the steps of several counters sharing txns (``repeat_puts``), until each
        reaches its target. Every ``COMPACT_EVERY_STEPS`` steps the history is compacted (in
        the background), so that a counter of any size fits in the server's quota."""
        chains: list[Chain] = []
        for parent, at_least in sorted(wanted.items()):
            paths.validate(parent)
            counter = await self.sequence_counter(parent)
            if counter >= at_least:
                continue
            current = await self.get(parent)
            value = current[0] if current is not None else b""
            chains.append((self._keys.key(parent), value, at_least - counter, parent))
        total = 0
        while chains:
            # a slice of at most COMPACT_EVERY_STEPS steps, shared out over the chains
            budget = COMPACT_EVERY_STEPS
            now: list[Chain] = []
            later: list[Chain] = []
            for key, value, count, tag in sorted(chains, key=lambda c: c[2]):
                share = min(count, max(1, budget // (len(chains) - len(now))))
                budget -= share
                now.append((key, value, share, tag))
                if count > share:
                    later.append((key, value, count - share, tag))
            failed: dict[Any, MetadataStoreError] = {}
            await repeat_puts(self._conn, now, failed, self._txn_ops, self._txn_bytes)
            if failed:
                raise next(iter(failed.values()))
            total += sum(c[2] for c in now)
            chains = later
            if chains:
                await self.compact_history(wait=False)
        return total

    async def compact_history(self, *, wait: bool = True) -> None:
        """Compact etcd's history up to now (it is global: every key's old revisions go).
        ``wait``: until the space is freed (etcd's physical compaction, which takes longer the
        more the server holds, not the more was written); else etcd frees it in the background,
        in small batches, and its pages are reused by the writes that follow."""
        conn = self._conn
        resp = await conn.range(None, rpc.RangeRequest(key=self._keys.key(paths.SEPARATOR), count_only=True))
        request = rpc.CompactionRequest(revision=resp.header.revision, physical=wait)
        timeout = max(conn.timeout, 120.0)
        try:
            await conn.call(None, lambda md: conn.kv.Compact(request, timeout=timeout, metadata=md))
        except MetadataStoreError as e:
            if "compacted" not in str(e):  # already compacted at or past that revision: fine
                raise

    # -- helpers of the bulk operations --

    async def _txn(self, request: Any) -> Any:
        """One txn; ``_TxnTooBig`` (after shrinking the budgets) when the server refuses its size."""
        try:
            return await self._conn.txn(None, request)
        except MetadataStoreError as e:
            text = str(e)
            if "too many operations" in text:
                self._txn_ops = max(1, min(self._txn_ops, len(request.success)) // 2)
                raise _TxnTooBig from None
            if "too large" in text or "RESOURCE_EXHAUSTED" in text:
                self._txn_bytes = max(1024, min(self._txn_bytes, request.ByteSize()) // 2)
                raise _TxnTooBig from None
            raise

    async def _blind_puts(
        self, wanted: list[tuple[bytes, bytes, int, int]], failed: dict[int, MetadataStoreError]
    ) -> None:
        """``count`` blind puts of ``value`` on each ``key``, in txns of distinct keys, many in
        flight. ``wanted``: (key, value, count, tag); a failure is recorded in ``failed[tag]``."""
        if not wanted:
            return
        total = sum(n for _, _, n, _ in wanted)
        per_op = max(len(k) + len(v) + OP_OVERHEAD for k, v, _, _ in wanted)
        per_txn = max(1, min(self._txn_ops, self._txn_bytes // per_op))
        # as many txns as full ones would take; a chain longer than that puts one op in each of
        # them and sends the rest in rounds shared with the other long chains (``repeat_puts``)
        n_txns = max(1, -(-total // per_txn))
        txns: list[list[tuple[bytes, bytes, int, Any]]] = [[] for _ in range(n_txns)]
        singles: list[Chain] = []
        slot = 0
        for key, value, count, tag in sorted(wanted, key=lambda w: -w[2]):
            op = rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))  # one message, reused
            in_txns = min(count, n_txns)
            for k in range(in_txns):  # the txns it lands in are distinct
                txns[(slot + k) % n_txns].append((key, value, tag, op))
            slot += in_txns
            if count > in_txns:
                singles.append((key, value, count - in_txns, tag))
        sem = asyncio.Semaphore(_BULK_TXNS_IN_FLIGHT)

        async def send(ops: list[tuple[bytes, bytes, int, Any]]) -> None:
            if not ops or all(op[2] in failed for op in ops):
                return
            async with sem:
                request = rpc.TxnRequest(success=[op[3] for op in ops], failure=[])
                try:
                    await self._txn(request)
                    return
                except _TxnTooBig:
                    if len(ops) == 1:
                        key, value, tag, _ = ops[0]
                        failed[tag] = ValueTooLarge(self._keys.path_of(key) or "?", len(value), self._txn_bytes)
                        return
                except MetadataStoreError as e:  # unavailable, full, ...: whether applied is unknown
                    for op in ops:
                        failed.setdefault(op[2], e)
                    return
            half = len(ops) // 2
            await asyncio.gather(send(ops[:half]), send(ops[half:]))

        # the rest of the long chains: their steps share rounds of their own
        rest = repeat_puts(self._conn, singles, failed, self._txn_ops, self._txn_bytes)
        await asyncio.gather(*(send(t) for t in txns), rest)
