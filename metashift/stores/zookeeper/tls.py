"""TLS to ZooKeeper's ``secureClientPort`` (``tls=true``): the client's context, and the one line
that says why a handshake failed.

The server is verified with the URL's ``ca`` (else the system's trusted CAs) and its certificate
must name the host as the URL writes it (Python's hostname check: DNS names, or an IP address
SAN for an address). ``cert`` + ``key`` present a client certificate, which ZooKeeper's x509
authentication provider turns into the identity ``x509:<subject DN>`` (and which a server with
``ssl.clientAuth=need`` requires).
"""

from __future__ import annotations

import ssl

from ..errors import InvalidStoreURL
from ..urls import StoreURL

#: OpenSSL's verify result for a certificate that does not name the host (X509_V_ERR_HOSTNAME_MISMATCH).
_HOSTNAME_MISMATCH = 62
_IP_MISMATCH = 64


def client_context(url: StoreURL) -> ssl.SSLContext | None:
    """The TLS context of the URL's connections, ``None`` without TLS. A client certificate or
    CA that cannot be loaded is ``InvalidStoreURL`` naming the file (never what it holds)."""
    if not url.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=url.tls_ca)
    except (OSError, ssl.SSLError) as e:
        raise InvalidStoreURL(f"option ca: cannot load CA certificates from {url.tls_ca!r} ({_reason(e)})") from None
    if url.tls_cert is not None:
        try:
            context.load_cert_chain(url.tls_cert, url.tls_key)
        except (OSError, ssl.SSLError) as e:
            raise InvalidStoreURL(f"options cert and key: cannot load the client certificate {url.tls_cert!r} with "
                                  f"key {url.tls_key!r} ({_reason(e)})") from None
    return context


def refusal(e: BaseException, host: str, port: int) -> str | None:
    """The one line for a TLS handshake that failed for good (an untrusted or mismatched
    certificate, the server refusing ours); ``None`` for anything else (the server was not
    reached, or the connection just ended: worth another attempt)."""
    where = f"{host}:{port}"
    if isinstance(e, ssl.SSLCertVerificationError):
        if e.verify_code in (_HOSTNAME_MISMATCH, _IP_MISMATCH):
            return (f"TLS: hostname mismatch: the certificate of {where} is not valid for {host!r} "
                    "(connect by a name the certificate holds)")
        return f"TLS: the server's certificate is not trusted ({where}: {e.verify_message}; check ca=)"
    if isinstance(e, ssl.SSLError) and not isinstance(e, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        hint = ""
        reason = (e.reason or "").upper()
        if "ALERT" in reason and ("HANDSHAKE" in reason or "CERTIFICATE" in reason or "UNKNOWN_CA" in reason):
            hint = " (does it require a client certificate it trusts? cert= and key=)"
        elif "WRONG_VERSION_NUMBER" in reason or "PACKET_LENGTH" in reason:
            hint = " (is it ZooKeeper's secureClientPort?)"
        return f"TLS: the handshake with {where} failed: {_reason(e)}{hint}"
    return None


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError) and e.reason:
        return str(e.reason)
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return type(e).__name__
