"""``Calls``: how every part of the ZooKeeper store sends requests on its session, and the
requests it builds.

A call is bounded by the URL's ``timeout`` and its aiozk errors become the store's
(``errors.map_error``). getData, exists, setData and create2 are built in the codec's wire form,
the chroot and the ACL put in by ``forward.Rechroot`` as for the front's forwarded requests:
aiozk's generic request parts cost several µs per request to build (their answers are parsed by
``fast_reads`` / ``fast_writes``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiozk import protocol

from .. import errors, paths
from ..stat import Stat
from ..urls import StoreURL
from .errors import map_error
from .forward import Rechroot
from .raw import RawRequest
from .session import ZKSession
from .wire import CreateMode, Writer, ZStat
from .wire.constants import Op


class Calls:
    """Sends the store's requests on its session (one, or many pipelined), within the call
    timeout, and builds them under the chroot with the store's ACL."""

    def __init__(
        self, url: StoreURL, session: ZKSession, namespace: paths.Namespace, acl: list[Any], rechroot: Rechroot
    ) -> None:
        self.url = url
        self.session = session
        self.namespace = namespace
        self.acl = acl
        """The store's ACL, as aiozk's records (a create built by aiozk carries it)."""
        self.rechroot = rechroot

    # ---- sending --------------------------------------------------------------------------------

    async def call(self, request: Any, path: str) -> Any:
        """Send one request, bounded by the call timeout; aiozk errors become store errors."""
        if self.session.ended:
            raise errors.StoreUnavailable("the store is closed", path)
        try:
            async with asyncio.timeout(self.url.call_timeout):
                return await self.session.send(request)
        except Exception as e:
            raise map_error(e, path, self.url) from e

    async def send_all(self, requests: list[Any], path: str) -> list[asyncio.Future[Any] | None]:
        """Send ``requests`` back to back on the connection (one socket write, no task nor timer
        each) and wait until all are answered, within the call timeout; a future each, ``None``
        where the session was not connected. Not retried: the caller sends the failed ones again
        by ``call``."""
        futures = [self.session.send_now(r) for r in requests]
        pending = [f for f in futures if f is not None]
        if pending:
            try:
                async with asyncio.timeout(self.url.call_timeout):
                    await asyncio.wait(pending)
            except TimeoutError as e:
                raise map_error(e, path, self.url) from e
        return futures

    # ---- the requests ---------------------------------------------------------------------------

    def create_request(self, full: str, value: bytes, ephemeral: bool, sequential: bool) -> Any:
        """aiozk's create2 of ``full``, a server path (chroot included), with the store's ACL:
        for a ``multi`` built by aiozk."""
        request = protocol.Create2Request(path=full, data=value, acl=self.acl)
        request.set_flags(ephemeral=ephemeral, sequential=sequential, container=False)
        return request

    def read_request(self, opcode: int, path: str) -> RawRequest:
        """getData or exists of ``path``, without a watch."""
        return RawRequest(opcode, self.rechroot.path(path) + b"\0", False)  # watch: false (a jute bool)

    def set_data_request(self, path: str, value: bytes, version: int) -> RawRequest:
        """setData of ``path`` at ``version`` (-1: any)."""
        return RawRequest(Op.SET_DATA, self.rechroot.path(path) + Writer().buffer(value).int(version).bytes(), True)

    def create2(self, path: str, value: bytes, ephemeral: bool, sequential: bool) -> RawRequest:
        """A create2 of ``path`` with the store's ACL."""
        body = self.rechroot.create_body(path, Writer().buffer(value).bytes(), CreateMode.of(ephemeral, sequential))
        return RawRequest(Op.CREATE2, body, True)

    # ---- the answers ----------------------------------------------------------------------------

    def stat(self, path: str, zstat: ZStat) -> Stat:
        """The store's ``Stat`` of ZooKeeper's."""
        owner = zstat.ephemeral_owner
        return Stat(
            path=path,
            version=zstat.version,
            creation_timestamp=zstat.ctime,
            modification_timestamp=zstat.mtime,
            ephemeral=owner != 0,
            created_by_self=owner != 0 and owner == self.session.session_id,
            owner=owner,
        )
