"""Runs of writes: a session's consecutive creates, setData and deletes in one round to a store
that checks ZooKeeper's tree rules itself (``MetadataStore.tree_writes``; etcd: one txn), a lone
one too (a run of one: its checks and its write in one round).

A session's writes must apply in the order sent, so without this they go one at a time, each a
round trip or two; a client that pipelines (Pulsar's managed ledgers, kazoo's ``*_async``) waits
for every one in turn. A run is carried as one all-or-nothing round (cut where a write depends
on an earlier one of the run: ``RunCutter``); where a round's conditions fail, nothing of it is
written, the write it stopped at runs alone (which finds its error, or succeeds if the node
changed since) and the rest goes on as a run. Each write's bookkeeping and answer are those of
the single request."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from metashift.agent.core.gate import WriteGate
from metashift.agent.zookeeper.handlers.base import Body, ZkError, Zxid, check_path, error_code, is_virtual
from metashift.agent.zookeeper.handlers.nodes import Nodes
from metashift.agent.zookeeper.handlers.writes import Writes, create_body
from metashift.agent.zookeeper.session import ZkSession
from metashift.stores import MetadataStore, Stat
from metashift.stores.errors import MetadataStoreError
from metashift.stores.tree_writes import CreateNode, DeleteNode, RunCutter, SetNode, TreeResult, TreeWrite, parent_of
from metashift.stores.zookeeper.wire import CreateMode, Err, Op

log = logging.getLogger(__name__)

#: Requests a run may hold (creates only persistent or ephemeral: a sequential name needs a counter).
RUN_OPS = frozenset({Op.CREATE, Op.CREATE2, Op.SET_DATA, Op.DELETE})
#: Writes of one run at most (one etcd txn: ``stores.etcd.tree_writes.RUN_MAX_OPS``).
RUN_MAX = 40

#: A request's answer: (error code, body, zxid for the reply header).
Answer = tuple[int, Body, int]
#: A decoded request: (opcode, request record).
Request = tuple[int, Any]
#: Serves one request alone (``Handlers.handle``).
Handle = Callable[[ZkSession, int, Any], Awaitable[Answer]]


class WriteRuns:
    """A session's run of writes served in as few rounds as the store allows."""

    def __init__(self, gate: WriteGate, zxid: Zxid, writes: Writes, nodes: Nodes, handle: Handle) -> None:
        self.gate = gate
        self.zxid = zxid
        self.writes = writes
        self.nodes = nodes
        # the single path, for what a run cannot carry: the dispatcher's ``handle``, passed in
        # (the dispatcher holds these runs: importing it back would make a cycle)
        self.handle = handle
        self.writes_in_runs = 0
        """Writes that went to the store in a run of two or more (a figure, and what tests look at)."""

    def joins_run(self, op: int, request: Any) -> bool:
        """Whether a request may be served in a run of writes (on the store active now)."""
        if op not in RUN_OPS or request is None or not self.nodes.store.tree_writes_in_one_round:
            return False
        return op in (Op.SET_DATA, Op.DELETE) or request.flags in (CreateMode.PERSISTENT, CreateMode.EPHEMERAL)

    async def handle_run(self, session: ZkSession, requests: list[Request]) -> list[Answer]:
        """Serve ``requests`` (each ``joins_run``) in order: their answers, as ``handle`` gives."""
        answers: list[Answer] = []
        i = 0
        while i < len(requests):
            ops = self._run_from(requests, i)
            # alone: refused before the store, not a tree write, or a lone setData (the single
            # path is one round already, and names its failure without a second one)
            if not ops or (len(ops) == 1 and isinstance(ops[0], SetNode)):
                answers.append(await self.handle(session, *requests[i]))
                i += 1
                continue
            done = await self._serve_run(session, requests[i : i + len(ops)], ops)
            if len(ops) > 1:
                self.writes_in_runs += len(done)
            answers.extend(done)
            i += len(done)
            if len(done) < len(ops):  # the round stopped at this one: alone, it finds out why
                answers.append(await self.handle(session, *requests[i]))
                i += 1
        return answers

    def _run_from(self, requests: list[Request], start: int) -> list[TreeWrite]:
        """The tree writes of the longest run from ``start`` that one round can carry."""
        cutter = RunCutter()
        ops: list[TreeWrite] = []
        for op, req in requests[start : start + RUN_MAX]:
            try:
                write = self._tree_write(op, req)
            except ZkError:
                break  # refused before the store: answered alone
            if write is None or not cutter.fits(write):
                break
            ops.append(write)
        return ops

    def _tree_write(self, op: int, req: Any) -> TreeWrite | None:
        """The request as a tree write, after the checks the single request makes first."""
        if op in (Op.CREATE, Op.CREATE2):
            self.writes.check_create(req)
            if is_virtual(parent_of(req.path)):
                return None
            return CreateNode(req.path, req.data, CreateMode.ephemeral(req.flags))
        check_path(req.path)
        self.nodes.refuse_write(req.path)
        expected = None if req.version == -1 else req.version
        if op == Op.SET_DATA:
            return SetNode(req.path, req.data, expected)
        return DeleteNode(req.path, expected)

    async def _serve_run(self, session: ZkSession, requests: list[Request], ops: list[TreeWrite]) -> list[Answer]:
        """One round through the write gate: the answers of the writes that applied, from the first."""

        async def apply(store: MetadataStore) -> list[tuple[int, Body]]:
            done = await store.tree_writes(ops)
            return [await self._after(store, session, op, req, result)
                    for (op, req), result in zip(requests, done, strict=False)]

        try:
            answered = await self.gate.run(apply)
        except (MetadataStoreError, ZkError, ValueError, TypeError) as err:
            # the gate held past its bound, or the outcome is unknown: every write's answer (as ``handle``)
            code = error_code(err)
            if code in (Err.SYSTEMERROR, Err.CONNECTIONLOSS):
                log.warning("zookeeper run of %d writes failed: %s", len(ops), err)
            return [(code, b"", self.zxid.value)] * len(ops)
        except Exception:
            log.exception("zookeeper run of %d writes failed unexpectedly", len(ops))
            return [(Err.SYSTEMERROR, b"", self.zxid.value)] * len(ops)
        return [(code, body, self.zxid.bump()) for code, body in answered]

    async def _after(self, store: MetadataStore, session: ZkSession, op: int, req: Any,
                     result: TreeResult) -> tuple[int, Body]:
        """The bookkeeping and answer of one write of a run, as the single request does them."""
        try:
            if op in (Op.CREATE, Op.CREATE2):
                assert isinstance(result, Stat)
                stat = await self.writes.after_create(store, session, req.data, CreateMode.ephemeral(req.flags),
                                                      result)
                return Err.OK, create_body(op, stat.path, self.writes.created_zstat(session, stat, req.data))
            if op == Op.SET_DATA:
                assert isinstance(result, tuple)
                stat, children = result
                self.writes.registry.record_put(None, req.data, stat.ephemeral, stat)
                return Err.OK, self.writes.set_body(stat, req.data, children)
            self.writes.registry.record_delete(req.path)
            return Err.OK, b""
        except (MetadataStoreError, ZkError) as err:
            return error_code(err), b""
