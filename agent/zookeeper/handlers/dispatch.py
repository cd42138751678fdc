"""``Handlers``: one coroutine per ZooKeeper request type, found by opcode; every answer is
(error code, body, zxid), ZooKeeper's error codes for store and agent errors."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.router import Router
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper.handlers.acl import AclRequests
from metashift.agent.zookeeper.handlers.base import Body, ZkError, error_code
from metashift.agent.zookeeper.handlers.multi import MultiRequests
from metashift.agent.zookeeper.handlers.runs import WriteRuns
from metashift.agent.zookeeper.handlers.watch_requests import WatchRequests
from metashift.agent.zookeeper.pip454 import Pip454Flag
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.agent.zookeeper.watches import Watches
from metashift.stores.errors import MetadataStoreError
from metashift.stores.zookeeper.wire import Err, Op

log = logging.getLogger(__name__)


class Handlers(MultiRequests, WriteRuns, WatchRequests, AclRequests):
    """The ZooKeeper requests, on the agent's router, gate and session registry."""

    def __init__(
        self, router: Router, gate: WriteGate, registry: SessionRegistry, sessions: ZkSessions, watches: Watches,
        pip454_flag: Pip454Flag | None = None,
    ) -> None:
        super().__init__(router, gate, registry, sessions, watches, pip454_flag)
        self._table: dict[int, Callable[[ZkSession, Any], Awaitable[Body]]] = {
            Op.CREATE: self._create,
            Op.CREATE2: self._create2,
            Op.CREATE_CONTAINER: self._create2,
            Op.CREATE_TTL: self._create2,
            Op.DELETE: self._delete,
            Op.EXISTS: self._exists,
            Op.GET_DATA: self._get_data,
            Op.SET_DATA: self._set_data,
            Op.GET_ACL: self._get_acl,
            Op.SET_ACL: self._set_acl,
            Op.GET_CHILDREN: self._get_children,
            Op.GET_CHILDREN2: self._get_children2,
            Op.SYNC: self._sync,
            Op.CHECK: self._check,
            Op.MULTI: self._multi,
            Op.MULTI_READ: self._multi_read,
            Op.SET_WATCHES: self._set_watches,
            Op.SET_WATCHES2: self._set_watches,
            Op.ADD_WATCH: self._add_watch,
            Op.REMOVE_WATCHES: self._remove_watches,
            Op.CHECK_WATCHES: self._check_watches,
            Op.GET_EPHEMERALS: self._get_ephemerals,
            Op.GET_ALL_CHILDREN_NUMBER: self._get_all_children_number,
            Op.WHO_AM_I: self._who_am_i,
        }

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

    async def handle(self, session: ZkSession, op: int, request: Any) -> tuple[int, Body, int]:
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

