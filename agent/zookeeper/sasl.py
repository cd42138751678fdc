"""SASL at the ZooKeeper front, as ZooKeeper's server does it (``ZooKeeperServer.processSasl``):
the client's ``sasl`` requests (opcode 102, a token each) answered at once with the server's
token, per connection; on success the connection's identity is ``sasl:<user>``.

A client that fails is told so and never served: the answer carries ``AUTHFAILED`` (or, with
``zookeeper.require_sasl``, ``SESSIONCLOSEDREQUIRESASLAUTH``) and a null token, which ZooKeeper's
Java client reads as the end of the exchange (its ``AuthFailed`` event, and the client stops),
then the connection closes. With ``require_sasl`` a connection's other requests (but addAuth)
are refused the same way until its SASL completes (ZooKeeper's ``sessionRequireClientSASLAuth``).

The front serves DIGEST-MD5 only (``sasl_digest``). Kerberos (GSSAPI) would need a
``zookeeper/<host>`` service keytab on every agent's node for a name the members already trust,
and it would authenticate nothing the member's own agent does not already know: a member of a
Kerberos ensemble drops its SASL client for the front instead (``-Dzookeeper.sasl.client=false``),
and the agent keeps authenticating to the ensemble with its own credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from metashift.agent.zookeeper.connection import ClientConnection
from metashift.agent.zookeeper.sasl_digest import DigestMD5Server, SaslFailed
from metashift.agent.zookeeper.session import ZkSession
from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import ChildInfo, Err, Op, Reader
from metashift.stores.zookeeper.wire.jute import INT, REPLY, DecodeError

log = logging.getLogger(__name__)

#: How the member of a Kerberos (or any SASL) ensemble that the front does not serve stops asking.
MEMBER_FIX = "-Dzookeeper.sasl.client=false in the member's JVM options"
#: Requests a connection may send before its SASL completes even when SASL is required.
_BEFORE_SASL = frozenset({Op.SASL, Op.AUTH})


class FrontSasl:
    """The front's SASL settings: its DIGEST-MD5 users, and whether every connection must use them."""

    def __init__(self, users: Mapping[str, str] | None = None, *, required: bool = False) -> None:
        self._users = dict(users or {})
        self.required = required and bool(self._users)

    def __repr__(self) -> str:  # never the passwords
        return f"FrontSasl({len(self._users)} user(s), required={self.required})"

    def exchange(self) -> SaslExchange:
        """A new connection's SASL state."""
        return SaslExchange(self._users, self.required)


class SaslExchange:
    """One connection's SASL: its exchange in progress, and who it authenticated as."""

    def __init__(self, users: Mapping[str, str], required: bool) -> None:
        self._server = DigestMD5Server(users) if users else None
        self.required = required
        self.user: str | None = None

    def refuses(self, op: int) -> bool:
        """Whether request ``op`` must be refused: SASL is required and has not completed."""
        return self.required and self.user is None and op not in _BEFORE_SASL

    def refuse(self, session: ZkSession, conn: ClientConnection, xid: int, op: int) -> None:
        """Refuse request ``op`` of a connection that has not completed SASL, and close it."""
        log.warning("zookeeper session %#x from %s: request %d before SASL, which this front requires "
                    "(zookeeper.require_sasl); closing", session.id, conn.facts.peer, op)
        conn.send(_failure(xid, Err.SESSIONCLOSEDREQUIRESASLAUTH))
        conn.close()

    def answer(self, session: ZkSession, conn: ClientConnection, xid: int, data: bytes) -> bool:
        """Answer a ``sasl`` request (``data``: the packet, header included); False: the client
        failed, was told so, and the connection is closing."""
        try:
            token = Reader(data, 8).buffer() or b""
        except DecodeError:
            token = None
        peer = conn.facts.peer
        try:
            if token is None:
                raise SaslFailed("an undecodable sasl request")
            if self._server is None:
                raise SaslFailed("this front has no SASL users (zookeeper.sasl_users_file)")
            reply = self._server.evaluate(token)
        except SaslFailed as e:
            hint = "" if self._server is not None and "GSSAPI" not in str(e) else f"; if it needs none: {MEMBER_FIX}"
            log.warning("zookeeper session %#x from %s: SASL failed: %s%s; closing", session.id, peer, e, hint)
            conn.send(_failure(xid, Err.SESSIONCLOSEDREQUIRESASLAUTH if self.required else Err.AUTHFAILED))
            conn.close()
            return False
        if self._server.complete and self.user is None:
            self.user = self._server.user
            info = ChildInfo("sasl", str(self.user))
            if info not in session.auth:  # whoAmI names it, as ZooKeeper's ``sasl`` scheme id
                session.auth.append(info)
            log.info("zookeeper session %#x from %s: SASL DIGEST-MD5 authenticated user %r", session.id, peer,
                     self.user)
        conn.send(wire.frame(REPLY.pack(xid, 0, Err.OK) + INT.pack(len(reply)) + reply))
        return True


def _failure(xid: int, err: int) -> bytes:
    # with its null token: the Java client reads a token from any answer while SASL is under way
    # (an answer without one broke its read: ConnectionLoss, and it dialled again for ever)
    return wire.frame(REPLY.pack(xid, 0, err) + INT.pack(-1))
