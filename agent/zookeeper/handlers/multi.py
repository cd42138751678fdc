"""multi (all or nothing, on the single writes' checks: ``Writes``) and multiRead (on the reads'
``Reads``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from metashift.agent.zookeeper.handlers.base import (
    Body,
    ZkError,
    check_parent,
    check_path,
    error_code,
    expect_version,
    parent_of,
)
from metashift.agent.zookeeper.handlers.nodes import Nodes
from metashift.agent.zookeeper.handlers.reads import Reads
from metashift.agent.zookeeper.handlers.writes import Writes
from metashift.agent.zookeeper.session import ZkSession
from metashift.agent.zookeeper.stat import to_zstat
from metashift.stores import MetadataStore, paths
from metashift.stores.errors import MetadataStoreError
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import CreateMode, Err, MultiResult, Op

log = logging.getLogger(__name__)

CREATES = (Op.CREATE, Op.CREATE2, Op.CREATE_CONTAINER, Op.CREATE_TTL)
WRITES = (*CREATES, Op.DELETE, Op.SET_DATA, Op.CHECK)


@dataclass
class _Node:
    """What a multi's check phase knows of a path: exists, version, ephemeral, children count."""

    exists: bool
    version: int = 0
    ephemeral: bool = False
    children: int = 0


class Multi:
    """multi and multiRead, on the single requests' checks and writes."""

    def __init__(self, reads: Reads, writes: Writes, nodes: Nodes) -> None:
        self.reads = reads
        self.writes = writes
        self.nodes = nodes

    async def multi_read(self, session: ZkSession, req: wire.MultiRequest) -> Body:
        """multiRead (22): getData and getChildren, each with its own result or error."""
        results: list[MultiResult] = []
        for op, sub in req.ops:
            if op not in (Op.GET_DATA, Op.GET_CHILDREN):
                raise ZkError(Err.BADARGUMENTS, "multiRead holds getData and getChildren only")
            try:
                if op == Op.GET_DATA:
                    check_path(sub.path)
                    node = await self.nodes.node(sub.path)
                    if node is None:
                        raise ZkError(Err.NONODE)
                    results.append(MultiResult(Op.GET_DATA, 0, (node[0], node[1])))
                else:
                    kids, _ = await self.reads.children(session, wire.PathWatchRequest(sub.path, False))
                    results.append(MultiResult(Op.GET_CHILDREN, 0, kids))
            except (ZkError, MetadataStoreError) as err:
                results.append(MultiResult(Op.ERROR, error_code(err)))
        return wire.encode_multi(results)

    async def multi(self, session: ZkSession, req: wire.MultiRequest) -> Body:
        """All or nothing against every check a single call would make: every operation is first
        checked in order against the store as the earlier ones would leave it, and if one fails
        nothing is written (its error, OK before it, RUNTIMEINCONSISTENCY after it, as ZooKeeper
        answers). Then they are applied in order, each conditional on the version the check saw:
        a writer racing in between makes the multi fail part-way (documented)."""
        for op, _ in req.ops:
            if op not in WRITES:
                raise ZkError(Err.BADARGUMENTS, f"opcode {op} cannot be part of a multi")
        if not req.ops:
            return wire.encode_multi([])

        async def apply(store: MetadataStore) -> list[MultiResult]:
            failed = await self._check(store, req.ops)
            if failed is not None:
                return _failed(len(req.ops), *failed)
            results: list[MultiResult] = []
            for i, (op, sub) in enumerate(req.ops):
                try:
                    results.append(await self._apply(session, store, op, sub))
                except (ZkError, MetadataStoreError) as err:
                    log.warning("multi failed at operation %d after the check passed (a racing writer): %s", i, err)
                    return _failed(len(req.ops), i, error_code(err))
            return results

        results = await self.writes.write(apply)
        return wire.encode_multi(results)

    async def _check(self, store: MetadataStore, ops: list[tuple[int, Any]]) -> tuple[int, int] | None:
        """Run the ops against a view of the store; (index, error) of the first that would fail."""
        view: dict[str, _Node] = {}
        kids_of: dict[str, set[str]] = {}

        async def node(path: str) -> _Node:
            if path not in view:
                if path == paths.SEPARATOR:
                    view[path] = _Node(True)
                else:
                    got = await store.get(path)
                    view[path] = _Node(False) if got is None else _Node(True, got[1].version, got[1].ephemeral)
            return view[path]

        async def children(path: str) -> set[str]:
            if path not in kids_of:
                kids_of[path] = set(await store.get_children(path))
            return kids_of[path]

        for i, (op, sub) in enumerate(ops):
            try:
                if op in CREATES:
                    self.writes.check_create(sub)
                    parent = parent_of(sub.path)
                    if parent != paths.SEPARATOR:
                        p = await node(parent)
                        check_parent(parent, p.exists, p.ephemeral)
                    if not CreateMode.sequential(sub.flags):
                        if (await node(sub.path)).exists:
                            raise ZkError(Err.NODEEXISTS, sub.path)
                        view[sub.path] = _Node(True, 0, CreateMode.ephemeral(sub.flags))
                        kids_of[sub.path] = set()
                        (await children(parent)).add(sub.path.rsplit("/", 1)[1])
                else:  # delete, setData, check: the node at the expected version
                    check_path(sub.path)
                    if op != Op.CHECK:
                        self.nodes.refuse_write(sub.path)
                    n = await node(sub.path)
                    expect_version(sub.path, n.exists, n.version, sub.version)
                    if op == Op.DELETE:
                        if await children(sub.path):
                            raise ZkError(Err.NOTEMPTY, sub.path)
                        view[sub.path] = _Node(False)
                        (await children(parent_of(sub.path))).discard(sub.path.rsplit("/", 1)[1])
                    elif op == Op.SET_DATA:
                        n.version += 1
            except (ZkError, MetadataStoreError) as err:
                return i, error_code(err)
        return None

    async def _apply(self, session: ZkSession, store: MetadataStore, op: int, sub: Any) -> MultiResult:
        if op in CREATES:
            ephemeral = CreateMode.ephemeral(sub.flags)
            stat = await self.writes.names.put_new(store, sub.path, sub.data, ephemeral,
                                                   CreateMode.sequential(sub.flags))
            self.writes.registry.record_put(session.client if ephemeral else None, sub.data, ephemeral, stat)
            if op == Op.CREATE:
                return MultiResult(Op.CREATE, 0, stat.path)
            zstat = to_zstat(stat, len(sub.data), 0, session.id if ephemeral else 0)
            return MultiResult(op, 0, (stat.path, zstat))
        if op == Op.DELETE:
            await self.writes.delete_checked(store, sub.path, sub.version)
            return MultiResult(Op.DELETE)
        if op == Op.SET_DATA:
            stat, children = await self.writes.set_checked(store, sub.path, sub.data, sub.version)
            return MultiResult(Op.SET_DATA, 0, to_zstat(stat, len(sub.data), children, self.nodes.owner(sub.path)))
        return MultiResult(Op.CHECK)


def _failed(count: int, index: int, code: int) -> list[MultiResult]:
    """A multi that failed at operation ``index`` with ``code``, as ZooKeeper answers it: OK
    before it, ``code`` there, RUNTIMEINCONSISTENCY after it."""
    return [
        MultiResult(Op.ERROR, Err.OK if i < index else code if i == index else Err.RUNTIMEINCONSISTENCY)
        for i in range(count)
    ]
