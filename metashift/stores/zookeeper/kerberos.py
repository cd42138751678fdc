"""SASL GSSAPI (Kerberos V5) for ZooKeeper (``sasl=GSSAPI``): RFC 4752 written on python-gssapi.

Not pure-sasl's GSSAPI mechanism: it runs on pykerberos (``kerberos``), which takes credentials
only from the process's default credential cache or ``KRB5_CLIENT_KTNAME`` — process-wide
environment, so two stores with two principals could not live in one process. python-gssapi's
``Credentials(store=...)`` (MIT's ``gss_acquire_cred_from``) takes the keytab per store, and keeps
the tickets in a ``MEMORY:`` cache of this process (one per principal and keytab), renewed from
the keytab when they expire.

The exchange (what Java's ``GssKrb5Client`` does against ZooKeeper's ``GssKrb5Server``): the
security context is established with mutual authentication (the client's AP-REQ, the server's
AP-REP; an empty token then, as Java sends, asks for the next step); the server then sends 4
bytes wrapped — the security layers it offers and its largest buffer — and the client answers,
wrapped, "no security layer" (1) with a buffer size of 0 (RFC 4752: none without a layer) and no
authorization id (the principal itself); the server's last answer is empty. ZooKeeper's session
then carries the identity ``sasl:<principal>`` (as its Kerberos name rules shorten it).

The server principal is ``service/host@REALM``, ``host`` as connected to (the URL's name): MIT's
``krb5.conf`` decides canonicalisation (``dns_canonicalize_hostname``, ``rdns``) and the realm
(``domain_realm``, else ``default_realm``); the configuration comes from the environment as MIT
reads it (``KRB5_CONFIG``), never from here. Calls that may reach the KDC run in a thread.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from .errors import SaslRefused

#: The security layer chosen: none (RFC 4752 3.1: bit 1), since TLS protects the connection if anything does.
NO_SECURITY_LAYER = 1

# MIT krb5's error codes, as GSS-API's minor status (unsigned) carries them
_KDC_UNREACH = 2529639068  # KRB5_KDC_UNREACH: "Cannot contact any KDC for realm"
_CLIENT_UNKNOWN = 2529638918  # KRB5KDC_ERR_C_PRINCIPAL_UNKNOWN
_SERVER_UNKNOWN = 2529638919  # KRB5KDC_ERR_S_PRINCIPAL_UNKNOWN
_PREAUTH_FAILED = 2529638936  # KRB5KDC_ERR_PREAUTH_FAILED
_INTEGRITY_FAILED = 2529638943  # KRB5KRB_AP_ERR_BAD_INTEGRITY: a key that is not the principal's
_NO_CCACHE = 2529639107  # KRB5_FCC_NOFILE: "No credentials cache found"
_NO_CREDENTIALS = 2529639053  # KG_EMPTY_CCACHE: "No Kerberos credentials available (default cache: ...)"
_KEY_EXPIRED = 2529638925  # KRB5KDC_ERR_KEY_EXP
_CLIENT_REVOKED = 2529638930  # KRB5KDC_ERR_CLIENT_REVOKED


class Kerberos:
    """SASL GSSAPI for one connection: ``principal`` (``None``: the credential cache's) with its
    ``keytab`` (``None``: the default credential cache, ``KRB5CCNAME``), to ``service/host``."""

    name = "GSSAPI"

    def __init__(self, principal: str | None, keytab: str | None, service: str, host: str) -> None:
        self.principal = principal
        self.keytab = keytab
        self.target = f"{service}/{host.lower()}"
        self.who = f"principal {principal!r}" if principal else "the credential cache's principal"
        self._context: Any = None
        self._layer_chosen = False

    async def start(self) -> bytes:
        return await asyncio.to_thread(self._first_token)

    async def respond(self, token: bytes | None) -> bytes | None:
        if self._layer_chosen:  # the server's last answer, to our security-layer choice
            return None
        if not self._context.complete:
            if not token:  # ZooKeeper without a SASL server (no JAAS Server section) answers with nothing
                raise SaslRefused(f"Kerberos: {self.target} answered with no token (is SASL set up on the server: a "
                                  "JAAS 'Server' section with Krb5LoginModule?)")
            out = await asyncio.to_thread(self._step, token)
            return out or b""  # established: an empty token asks the server for its security layers
        if not token:
            raise SaslRefused(f"Kerberos: {self.target} sent no security-layer offer")
        return self._choose_layer(token)

    # ---- the steps (blocking: in a thread where they may reach the KDC) -------------------------

    def _first_token(self) -> bytes:
        gssapi = _gssapi()
        target = gssapi.Name(self.target.replace("/", "@", 1), gssapi.NameType.hostbased_service)
        try:
            credentials = self._credentials(gssapi)
            self._context = gssapi.SecurityContext(
                name=target, creds=credentials, usage="initiate", mech=gssapi.MechType.kerberos,
                flags=[gssapi.RequirementFlag.mutual_authentication, gssapi.RequirementFlag.integrity],
            )
            return bytes(self._context.step() or b"")
        except gssapi.exceptions.GSSError as e:
            raise SaslRefused(self._explain(e)) from None

    def _credentials(self, gssapi: Any) -> Any:
        name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal) if self.principal else None
        if self.keytab is None:
            return gssapi.Credentials(name=name, usage="initiate")
        try:
            with open(self.keytab, "rb"):
                pass
        except OSError as e:
            raise SaslRefused(f"Kerberos: cannot read keytab {self.keytab!r} ({e.strerror or e})") from None
        # the tickets of this principal and keytab, in this process's memory: not the user's cache
        cache = hashlib.sha256(f"{self.principal}\0{self.keytab}".encode()).hexdigest()[:24]
        return gssapi.Credentials(name=name, usage="initiate",
                                  store={"client_keytab": self.keytab, "ccache": f"MEMORY:metashift-{cache}"})

    def _step(self, token: bytes) -> bytes | None:
        gssapi = _gssapi()
        try:
            out = self._context.step(token)
        except gssapi.exceptions.GSSError as e:
            raise SaslRefused(self._explain(e)) from None
        return None if out is None else bytes(out)

    def _choose_layer(self, token: bytes) -> bytes:
        gssapi = _gssapi()
        try:
            offer = self._context.unwrap(token).message
        except gssapi.exceptions.GSSError as e:
            raise SaslRefused(f"Kerberos: the security-layer offer of {self.target} does not unwrap: "
                              f"{_statuses(e)}") from None
        if len(offer) != 4:
            raise SaslRefused(f"Kerberos: {self.target} sent a {len(offer)}-byte security-layer offer (RFC 4752: 4)")
        if not offer[0] & NO_SECURITY_LAYER:
            raise SaslRefused(f"Kerberos: {self.target} requires a SASL security layer (offers {offer[0]:#x}), "
                              "which this client does not do (use TLS)")
        self._layer_chosen = True
        choice = bytes([NO_SECURITY_LAYER, 0, 0, 0])  # no layer, buffer size 0; no authorization id
        return bytes(self._context.wrap(choice, encrypt=False).message)

    def _explain(self, e: Any) -> str:
        """The one line for a GSS-API failure (a ticket not had, the KDC not reached, ...)."""
        who = self.principal or "the credential cache's principal"
        detail = _statuses(e)
        code = getattr(e, "min_code", 0)
        if code == _KDC_UNREACH:
            return f"Kerberos: KDC unreachable: {detail} (getting a ticket for {who}; check KRB5_CONFIG's realms)"
        if code == _CLIENT_UNKNOWN:
            return f"Kerberos: cannot get a ticket for principal {who} from the KDC: {detail}"
        if code in (_PREAUTH_FAILED, _INTEGRITY_FAILED):
            return (f"Kerberos: cannot get a ticket for principal {who} from the KDC: {detail} "
                    f"(the keytab's key is not the principal's: a stale or wrong keytab {self.keytab!r}?)")
        if code in (_KEY_EXPIRED, _CLIENT_REVOKED):
            return f"Kerberos: the KDC refuses principal {who}: {detail}"
        if code == _SERVER_UNKNOWN:
            return (f"Kerberos: the KDC knows no server principal {self.target} ({detail}): service= and the URL's "
                    "host name must make the ZooKeeper server's principal")
        if code in (_NO_CCACHE, _NO_CREDENTIALS):
            if self.keytab is not None:
                return f"Kerberos: keytab {self.keytab!r} holds no key for principal {who}"
            return f"Kerberos: no ticket for {who} in the credential cache: {detail} (kinit, or principal= and keytab=)"
        return f"Kerberos: cannot authenticate {who} to {self.target}: {detail}"


def _statuses(e: Any) -> str:
    """GSS-API's minor (mechanism) messages of ``e``, else its major ones."""
    try:
        messages = e.get_all_statuses(e.min_code, False) if e.min_code else []
        messages = messages or e.get_all_statuses(e.maj_code, True)
        return "; ".join(str(m) for m in messages)
    except Exception:  # a message that cannot be had: the class says enough
        return type(e).__name__


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError:
        raise SaslRefused("sasl=GSSAPI needs python-gssapi (pip install 'metashift[kerberos]', which builds it "
                          "against the system's MIT krb5)") from None
    return gssapi
