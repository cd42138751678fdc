"""getACL and setACL (ACLs are neither stored nor enforced: every node is ``world:anyone`` ALL),
addAuth (``digest`` recorded) and whoAmI."""

from __future__ import annotations

import base64
import hashlib

from metashift.agent.zookeeper.handlers.base import Body, ZkError, check_path
from metashift.agent.zookeeper.handlers.nodes import Nodes
from metashift.agent.zookeeper.session import ZkSession
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import OPEN_ACL_UNSAFE, ChildInfo, Err, Writer


class AclRequests:
    """ACLs and authentication, one method per opcode."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes

    async def get_acl(self, session: ZkSession, req: wire.PathRequest) -> Body:
        """getACL (6): ``world:anyone`` ALL, and the Stat."""
        check_path(req.path)
        node = await self.nodes.node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        return Writer().acls(OPEN_ACL_UNSAFE).stat(node[1]).bytes()

    async def set_acl(self, session: ZkSession, req: wire.SetACLRequest) -> Body:
        """setACL (7): accepted and not kept (the aversion stays 0); the Stat."""
        check_path(req.path)
        if not req.acl:
            raise ZkError(Err.INVALIDACL)
        node = await self.nodes.node(req.path)
        if node is None:
            raise ZkError(Err.NONODE)
        if req.version not in (-1, node[1].aversion):
            raise ZkError(Err.BADVERSION)
        return Writer().stat(node[1]).bytes()

    @staticmethod
    def add_auth(session: ZkSession, req: wire.AuthRequest) -> int:
        """addAuth: ``digest`` (user:password) is recorded (whoAmI names it); other schemes fail."""
        if req.scheme != "digest":
            return Err.AUTHFAILED
        text = req.auth.decode("utf-8", "replace")
        user, sep, password = text.partition(":")
        if not sep or not user:
            return Err.AUTHFAILED
        digest = base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode()
        info = ChildInfo("digest", f"{user}:{digest}")
        if info not in session.auth:
            session.auth.append(info)
        return Err.OK

    async def who_am_i(self, session: ZkSession, req: wire.EmptyRequest) -> Body:
        """whoAmI (107): the client's address, and the digest users of its addAuth."""
        infos = [ChildInfo("ip", "127.0.0.1"), *(ChildInfo(i.scheme, i.user.split(":", 1)[0]) for i in session.auth)]
        w = Writer().int(len(infos))
        for info in infos:
            w.string(info.scheme).string(info.user)
        return w.bytes()

