"""SASL DIGEST-MD5, the server's side (RFC 2831, authentication only: ``qop=auth``), as
ZooKeeper's server runs it for a client whose JAAS ``Client`` section holds ``DigestLoginModule``.

Written here because no well-kept Python library has it: ``pure-sasl`` (the one kazoo uses, and
the store layer's client) is client-only, and Cyrus SASL's bindings would bring a C library and
its plugin configuration onto every node for one mechanism of two messages. The exchange is
small: the server's challenge (realm, nonce), the client's digest response checked against the
user's password, the server's ``rspauth`` proving it knew the password too. No integrity or
confidentiality layer is offered (ZooKeeper negotiates none either: TLS protects the wire).

ZooKeeper's own constants: the client asks for service ``zookeeper`` on host ``zk-sasl-md5``
(hard-wired in ``SecurityUtils.createSaslClient``), and the realm is that host name.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

#: ZooKeeper's DIGEST-MD5 server name, which it also offers as the realm.
REALM = "zk-sasl-md5"
SERVICE = "zookeeper"
#: Longest client response taken: a handful of short directives.
MAX_RESPONSE = 4096
_SINGLE = ("username", "realm", "nonce", "cnonce", "nc", "qop", "digest-uri", "response", "maxbuf",
           "charset", "authzid")


class SaslFailed(Exception):
    """The exchange failed: the message says why in one line (a user name, never a password)."""


class DigestMD5Server:
    """One DIGEST-MD5 exchange, the server's side, against ``users`` (name -> password)."""

    def __init__(self, users: Mapping[str, str], *, realm: str = REALM, service: str = SERVICE,
                 host: str = REALM) -> None:
        self._users = users
        self.realm = realm
        self.digest_uri = f"{service}/{host}"
        self._nonce = ""
        self._step = 0
        self.user: str | None = None
        """The authenticated user, once ``complete``."""

    @property
    def complete(self) -> bool:
        return self.user is not None

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token: the challenge to its first (empty) one, the
        ``rspauth`` to its response (the exchange is then ``complete``). ``SaslFailed`` otherwise."""
        step, self._step = self._step, self._step + 1
        if step == 0:
            if token:  # GSSAPI's first token is Kerberos' AP-REQ; DIGEST-MD5's client sends none
                raise SaslFailed("the client opened with a token: not DIGEST-MD5 (GSSAPI?), which is all this "
                                 "server takes")
            self._nonce = secrets.token_urlsafe(24)
            return (f'realm="{self.realm}",nonce="{self._nonce}",qop="auth",charset=utf-8,'
                    f"algorithm=md5-sess").encode()
        if step == 1:
            return self._check(token)
        raise SaslFailed("a token after the exchange ended")

    def _check(self, token: bytes) -> bytes:
        if len(token) > MAX_RESPONSE:
            raise SaslFailed(f"a response of {len(token)} bytes")
        fields = parse(token)
        utf8 = fields.get("charset") == b"utf-8"
        if "charset" in fields and not utf8:
            raise SaslFailed("charset must be utf-8")
        text = {k: v.decode("utf-8" if utf8 else "latin-1") for k, v in fields.items()}
        for name in ("username", "nonce", "cnonce", "nc", "digest-uri", "response"):
            if name not in text:
                raise SaslFailed(f"the response has no {name}")
        user = text["username"]
        if text["nonce"] != self._nonce:
            raise SaslFailed(f"user {user!r}: the response's nonce is not the one offered")
        if text["nc"] != "00000001":
            raise SaslFailed(f"user {user!r}: nonce count {text['nc']!r}, not 00000001")
        qop = text.get("qop", "auth")
        if qop != "auth":
            raise SaslFailed(f"user {user!r}: qop {qop!r}: only auth is offered")
        realm = text.get("realm", "")
        if realm not in ("", self.realm):
            raise SaslFailed(f"user {user!r}: realm {realm!r}, not {self.realm!r}")
        if text["digest-uri"] != self.digest_uri:
            raise SaslFailed(f"user {user!r}: digest-uri {text['digest-uri']!r}, not {self.digest_uri!r}")
        authzid = text.get("authzid")
        if authzid not in (None, "", user):  # no proxying: the identity is the user authenticated
            raise SaslFailed(f"user {user!r} asked to act as {authzid!r}")
        known = user in self._users
        # an unknown user costs the same work as a wrong password, and reads the same to the client
        password = self._users[user] if known else secrets.token_hex(16)
        ha1 = _ha1(user, realm, password, text["nonce"], text["cnonce"], authzid or None, utf8)
        expected = _digest(ha1, text, qop, b"AUTHENTICATE:" + self.digest_uri.encode())
        if not hmac.compare_digest(expected, text["response"].lower().encode()) or not known:
            raise SaslFailed(f"user {user!r}: {'wrong password' if known else 'no such user'}")
        self.user = user
        return b"rspauth=" + _digest(ha1, text, qop, b":" + self.digest_uri.encode())


def parse(token: bytes) -> dict[str, bytes]:
    """A digest-response's directives (RFC 2831 2.1.2: ``name=value`` or ``name="quoted"``, comma
    separated); a directive named twice, or text that is not one, raises ``SaslFailed``."""
    out: dict[str, bytes] = {}
    i, n = 0, len(token)
    while i < n:
        while i < n and token[i] in b" \t\r\n,":
            i += 1
        if i >= n:
            break
        eq = token.find(b"=", i)
        if eq < 0:
            raise SaslFailed("the response is not name=value directives")
        name = token[i:eq].strip().decode("ascii", "replace").lower()
        i = eq + 1
        if i < n and token[i : i + 1] == b'"':
            value = bytearray()
            i += 1
            while i < n and token[i : i + 1] != b'"':
                if token[i : i + 1] == b"\\" and i + 1 < n:
                    i += 1
                value.append(token[i])
                i += 1
            if i >= n:
                raise SaslFailed("the response has an unterminated quoted string")
            i += 1
            raw = bytes(value)
        else:
            end = token.find(b",", i)
            end = n if end < 0 else end
            raw, i = token[i:end].strip(), end
        if name in out and name in _SINGLE:
            raise SaslFailed(f"the response names {name} twice")
        out[name] = raw
    return out


def _encode(text: str, utf8: bool) -> bytes:
    """RFC 2831's rule for the strings hashed: ISO 8859-1 when they fit in it, UTF-8 otherwise
    (and only with ``charset=utf-8``)."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        if not utf8:
            raise SaslFailed("a name outside ISO 8859-1 without charset=utf-8") from None
        return text.encode("utf-8")


def _ha1(user: str, realm: str, password: str, nonce: str, cnonce: str, authzid: str | None, utf8: bool) -> bytes:
    key = hashlib.md5(_encode(f"{user}:{realm}:{password}", utf8)).digest()
    a1 = key + f":{nonce}:{cnonce}".encode() + (b":" + authzid.encode("utf-8") if authzid else b"")
    return hashlib.md5(a1).hexdigest().encode()


def _digest(ha1: bytes, text: Mapping[str, str], qop: str, a2: bytes) -> bytes:
    parts = [ha1, text["nonce"].encode(), text["nc"].encode(), text["cnonce"].encode(), qop.encode(),
             hashlib.md5(a2).hexdigest().encode()]
    return hashlib.md5(b":".join(parts)).hexdigest().encode()
