"""``Handlers``: the ordinary path's table from opcode to the collaborator that serves it (one
method per opcode); every answer is (error code, body, zxid), ZooKeeper's error codes for store
and agent errors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.router import Router
from metashift.agent.core.sequence_floors import SequenceFloors
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper.handlers.acl import AclRequests
from metashift.agent.zookeeper.handlers.base import Body, ZkError, Zxid, error_code
from metashift.agent.zookeeper.handlers.multi import Multi
from metashift.agent.zookeeper.handlers.nodes import Nodes
from metashift.agent.zookeeper.handlers.reads import Reads
from metashift.agent.zookeeper.handlers.runs import Answer, Request, WriteRuns
from metashift.agent.zookeeper.handlers.sequential import SequentialNames
from metashift.agent.zookeeper.handlers.watch_requests import WatchRequests
from metashift.agent.zookeeper.handlers.writes import Writes
from metashift.agent.zookeeper.pip454 import Pip454Flag
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.agent.zookeeper.watches import Watches
from metashift.stores.errors import MetadataStoreError
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import Err, Op

log = logging.getLogger(__name__)


class Handlers:
    """The ordinary path: the ZooKeeper requests on the agent's router, gate and session registry,
    each served by the collaborator named for it (``reads``, ``writes``, ``multi``, ``runs``,
    ``watch_requests``, ``acl``)."""

    #: Requests that change nothing: a run of them may be served concurrently.
    READS = frozenset({
        Op.EXISTS, Op.GET_DATA, Op.GET_ACL, Op.GET_CHILDREN, Op.GET_CHILDREN2, Op.MULTI_READ,
        Op.GET_EPHEMERALS, Op.GET_ALL_CHILDREN_NUMBER, Op.WHO_AM_I, Op.CHECK_WATCHES,
    })

    #: Requests that read the store: held while writes are held for a migration (``WriteGate.readable``).
    STORE_READS = frozenset({
        Op.EXISTS, Op.GET_DATA, Op.GET_CHILDREN, Op.GET_CHILDREN2, Op.MULTI_READ, Op.GET_ALL_CHILDREN_NUMBER,
        Op.SYNC,
    })

    def __init__(
        self, router: Router, gate: WriteGate, registry: SessionRegistry, sessions: ZkSessions, watches: Watches,
        zxid: Zxid, floors: SequenceFloors, pip454_flag: Pip454Flag | None = None,
    ) -> None:
        self.gate = gate
        self.zxid = zxid
        self.nodes = Nodes(router, registry, sessions, pip454_flag or Pip454Flag())
        self.reads = Reads(self.nodes, watches)
        self.writes = Writes(gate, registry, zxid, self.nodes, SequentialNames(floors))
        self.multi = Multi(self.reads, self.writes, self.nodes)
        self.runs = WriteRuns(gate, zxid, self.writes, self.nodes, self.handle)
        self.watch_requests = WatchRequests(watches, self.nodes)
        self.acl = AclRequests(self.nodes)
        reads, writes, watch_requests, acl = self.reads, self.writes, self.watch_requests, self.acl
        self._table: dict[int, Callable[[ZkSession, Any], Awaitable[Body]]] = {
            Op.CREATE: writes.create,
            Op.CREATE2: writes.create2,
            Op.CREATE_CONTAINER: writes.create2,
            Op.CREATE_TTL: writes.create2,
            Op.DELETE: writes.delete,
            Op.EXISTS: reads.exists,
            Op.GET_DATA: reads.get_data,
            Op.SET_DATA: writes.set_data,
            Op.GET_ACL: acl.get_acl,
            Op.SET_ACL: acl.set_acl,
            Op.GET_CHILDREN: reads.get_children,
            Op.GET_CHILDREN2: reads.get_children2,
            Op.SYNC: reads.sync,
            Op.CHECK: writes.check,
            Op.MULTI: self.multi.multi,
            Op.MULTI_READ: self.multi.multi_read,
            Op.SET_WATCHES: watch_requests.set_watches,
            Op.SET_WATCHES2: watch_requests.set_watches,
            Op.ADD_WATCH: watch_requests.add_watch,
            Op.REMOVE_WATCHES: watch_requests.remove_watches,
            Op.CHECK_WATCHES: watch_requests.check_watches,
            Op.GET_EPHEMERALS: reads.get_ephemerals,
            Op.GET_ALL_CHILDREN_NUMBER: reads.get_all_children_number,
            Op.WHO_AM_I: acl.who_am_i,
        }

    async def handle(self, session: ZkSession, op: int, request: Any) -> Answer:
        """Serve one request: (error code, body, zxid for the reply header)."""
        handler = self._table.get(op)
        if handler is None or request is None:
            return Err.UNIMPLEMENTED, b"", self.zxid.value
        try:
            if op in self.STORE_READS:
                await self.gate.readable()
            body = await handler(session, request)
        except asyncio.CancelledError:
            raise
        except (MetadataStoreError, ZkError, ValueError, TypeError) as err:
            code = error_code(err)
            if code in (Err.SYSTEMERROR, Err.CONNECTIONLOSS):
                log.warning("zookeeper request %d failed: %s", op, err)
            return code, b"", self.zxid.value
        except Exception:
            log.exception("zookeeper request %d failed unexpectedly", op)
            return Err.SYSTEMERROR, b"", self.zxid.value
        return Err.OK, body, self.zxid.value

    def joins_run(self, op: int, request: Any) -> bool:
        """Whether a request may be served in a run of writes (``WriteRuns``)."""
        return self.runs.joins_run(op, request)

    async def handle_run(self, session: ZkSession, requests: list[Request]) -> list[Answer]:
        """Serve a run of writes (each ``joins_run``) in order: their answers, as ``handle`` gives."""
        return await self.runs.handle_run(session, requests)

    def add_auth(self, session: ZkSession, req: wire.AuthRequest) -> int:
        """addAuth (answered at once, outside the connection's order): its error code."""
        return self.acl.add_auth(session, req)

    @property
    def writes_in_runs(self) -> int:
        """Writes that went to the store in a run of two or more (``WriteRuns``)."""
        return self.runs.writes_in_runs
