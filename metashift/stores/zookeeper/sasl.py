"""ZooKeeper's SASL, as its own Java client does it (``ClientCnxn``, ``ZooKeeperSaslClient``): after
the session handshake and before any other request, on every new connection.

The wire: each token goes in a ``sasl`` request (opcode 102, record ``GetSASLRequest {buffer
token}``) with an ordinary xid, the next of the session's; the server answers it in order with the
same xid (``SetSASLResponse {buffer token}``, zxid 0; ``ZooKeeperServer.processSasl`` runs it at
once, outside the request pipeline). A refusal is that answer with error ``AuthFailed`` (-115),
or ``SessionClosedRequireSaslAuth`` (-124) on a server with
``zookeeper.sessionRequireClientSASLAuth=true``, and then the connection is closed (the session
is not: a resumed session survives a failed attempt). The exchange ends when the mechanism has
nothing more to send: for DIGEST-MD5 once the server's ``rspauth`` is checked, for GSSAPI with
the server's empty last answer to the security-layer choice.

The mechanisms: DIGEST-MD5 here, through pure-sasl (the library kazoo uses), with the service
``zookeeper`` and the host ``zk-sasl-md5`` that ZooKeeper fixes for it (its digest-uri, whatever
host is connected to); GSSAPI in ``kerberos``. No token, password or key is ever logged or put in
an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from puresasl import QOP, SASLError, SASLProtocolException
from puresasl.client import SASLClient

from ..urls import StoreURL
from .errors import SaslRefused
from .wire.constants import XID_WATCH_EVENT, Err, Op
from .wire.jute import HEADER, INT, REPLY, DecodeError, Reader, Writer, frame

#: ZooKeeper's fixed DIGEST-MD5 service and host (``SecurityUtils``: the digest-uri ``zookeeper/zk-sasl-md5``).
DIGEST_SERVICE = "zookeeper"
DIGEST_HOST = "zk-sasl-md5"
#: More rounds than any mechanism takes (DIGEST-MD5 2, GSSAPI 3): a server that keeps asking is wrong.
MAX_ROUNDS = 10
#: The most of a SASL answer read (tokens are a few kB).
MAX_TOKEN = 1 << 20

_REFUSALS = {
    Err.AUTHFAILED: "AuthFailed",
    Err.SESSIONCLOSEDREQUIRESASLAUTH: "SessionClosedRequireSaslAuth",
}


class Mechanism(Protocol):
    """A SASL mechanism's client side, one per connection."""

    name: str
    who: str
    """Whom it authenticates, for messages (``user 'bob'``, ``principal 'alice@REALM'``)."""

    async def start(self) -> bytes:
        """The first token (empty when the mechanism has no initial response)."""
        ...

    async def respond(self, token: bytes | None) -> bytes | None:
        """The answer to the server's ``token``; ``None``: the exchange is over."""
        ...


class DigestMD5:
    """SASL DIGEST-MD5 with a user and password (``qop=auth``: ZooKeeper offers nothing else by
    default, and pure-sasl wraps nothing)."""

    name = "DIGEST-MD5"

    def __init__(self, username: str, password: str) -> None:
        self.who = f"user {username!r}"
        self._client = SASLClient(DIGEST_HOST, service=DIGEST_SERVICE, mechanism="DIGEST-MD5", qops=[QOP.AUTH],
                                  username=username, password=password)

    async def start(self) -> bytes:
        return b""  # DIGEST-MD5 has no initial response: the server's challenge comes first

    async def respond(self, token: bytes | None) -> bytes | None:
        if self._client.complete:
            return None
        if not token:  # ZooKeeper without a SASL server (no JAAS Server section) answers with nothing
            raise SaslRefused("SASL DIGEST-MD5: the server sent no challenge (is SASL set up on it: a JAAS "
                              "'Server' section with DigestLoginModule?)")
        try:
            answer = self._client.process(token)
        except SASLProtocolException as e:  # the server's rspauth is not from one that knows the password
            raise SaslRefused(f"the server failed DIGEST-MD5's mutual check ({e})") from None
        except SASLError as e:
            raise SaslRefused(f"DIGEST-MD5: {e}") from None
        if self._client.complete:  # the server's rspauth checked: nothing more to send
            self._client.dispose()  # the password and keys out of the mechanism
            return None
        return bytes(answer or b"")


def mechanism(url: StoreURL, host: str) -> Mechanism | None:
    """The SASL mechanism of a connection to ``host`` (the name connected to, as the URL writes
    it: GSSAPI's server principal is ``service/host@REALM``); ``None`` without ``sasl=``."""
    if url.sasl == "DIGEST-MD5":
        return DigestMD5(url.username or "", url.password or "")
    if url.sasl == "GSSAPI":
        from .kerberos import Kerberos

        return Kerberos(url.principal, url.keytab, url.sasl_service, host)
    return None


async def authenticate(conn: Any, mech: Mechanism, next_xid: Callable[[], int], answer_within: float,
                       where: str) -> None:
    """Run the SASL exchange on ``conn`` (before its read loop starts), each request with the xid
    ``next_xid`` gives, each answer within ``answer_within`` seconds. ``SaslRefused`` when the server
    refuses (``where``: the server, for the message); ``ConnectionError`` when the connection
    ends without an answer (worth another attempt)."""
    token: bytes | None = await mech.start()
    for _ in range(MAX_ROUNDS):
        xid = next_xid()
        conn.writer.write(frame(HEADER.pack(xid, Op.SASL) + Writer().buffer(token).bytes()))
        error, answer = await _answer(conn.reader, xid, answer_within)
        if error:
            refusal = _REFUSALS.get(error, f"error {error}")
            raise SaslRefused(f"SASL {mech.name} authentication to {where} refused: the server does not accept "
                              f"{mech.who} ({refusal})")
        token = await mech.respond(answer)
        if token is None:
            return
    raise SaslRefused(f"SASL {mech.name} with {where} did not complete in {MAX_ROUNDS} rounds")


async def _answer(reader: asyncio.StreamReader, xid: int, within: float) -> tuple[int, bytes | None]:
    """The server's answer to the SASL request ``xid``: (error code, token)."""
    try:
        async with asyncio.timeout(within):
            while True:
                (size,) = INT.unpack(await reader.readexactly(INT.size))
                if not REPLY.size <= size <= MAX_TOKEN:
                    raise ConnectionError(f"ZooKeeper sent a {size}-byte packet during SASL")
                raw = await reader.readexactly(size)
                got, _zxid, error = REPLY.unpack_from(raw)
                if got == XID_WATCH_EVENT:  # no watch is set on this connection yet; never for us
                    continue
                if got != xid:
                    raise ConnectionError(f"ZooKeeper answered xid {got} during SASL (expected {xid})")
                if error or len(raw) == REPLY.size:
                    return error, None
                return 0, Reader(raw, REPLY.size).buffer()
    except asyncio.IncompleteReadError:
        raise ConnectionError("ZooKeeper closed the connection during SASL") from None
    except DecodeError as e:
        raise ConnectionError(f"a SASL answer that does not decode: {e}") from None
