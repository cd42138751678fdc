"""What the Oxia connection presents and checks: the TLS channel credentials of the URL
(``tls``, ``ca``, ``cert``, ``key``), its bearer token (``token``, or ``token_file`` read again
when the file changes: OIDC tokens expire and a sidecar rewrites the file), and one line for the
TLS failures gRPC reports at length.

The token is a secret: it is kept here and in the calls' metadata only, never in a log line or an
error (``scrub`` takes it out of any text the server sends back).
"""

from __future__ import annotations

import logging
import os
import re
import time

import grpc

from ..errors import AuthFailed
from ..urls import StoreURL

log = logging.getLogger(__name__)

#: The token file is looked at (``stat``) at most this often, in seconds: a rewrite is seen
#: within a second, and a call costs no system call.
TOKEN_CHECK_INTERVAL = 1.0
#: A bearer token is printable ASCII without spaces (a JWT: base64url and dots); gRPC would refuse
#: anything else in the metadata with a message of its own.
_TOKEN = re.compile(r"[!-~]+")


def channel_credentials(url: StoreURL) -> grpc.ChannelCredentials | None:
    """The TLS credentials of ``url`` (the CA to verify the servers with, the client certificate),
    ``None`` for a plaintext channel. Read once: a connection verifies every server it is handed
    (the shard leaders the assignments name) with the same files."""
    if not url.tls:
        return None
    try:
        ca, key, cert = url.tls_files()
    except OSError as e:
        raise AuthFailed(f"oxia: cannot read a TLS file ({e.filename}: {e.strerror or e})") from None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


class TokenSource:
    """The bearer token of a URL: ``token=`` as given, or ``token_file=`` as it reads now (looked
    at every ``TOKEN_CHECK_INTERVAL`` seconds, read again when its identity, size or modification
    time changed)."""

    def __init__(self, url: StoreURL) -> None:
        self.path: str | None = url.options.get("token_file")
        self._token: str | None = url.options.get("token")
        self._seen: tuple[int, int, int, int] | None = None
        self._checked = float("-inf")
        if self.path is not None:
            self._token = self._read(strict=True)

    @property
    def reloads(self) -> bool:
        """The token comes from a file that may change."""
        return self.path is not None

    def current(self) -> str | None:
        """The token to send now."""
        if self.path is not None and time.monotonic() - self._checked >= TOKEN_CHECK_INTERVAL:
            self._reload()
        return self._token

    def refresh(self) -> bool:
        """Look at the file now (a call was refused: it may have been rewritten within the last
        second); true when the token changed."""
        if self.path is None:
            return False
        before = self._token
        self._seen = None  # read it whatever its stat says (a rewrite within the clock's tick)
        self._reload()
        return self._token != before

    def scrub(self, text: str) -> str:
        """``text`` with the token (should a server echo it) replaced by ``***``."""
        token = self._token
        return text.replace(token, "***") if token else text

    def _reload(self) -> None:
        self._checked = time.monotonic()
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError as e:
            log.warning("oxia: cannot look at token_file %s (%s); keeping the token read before",
                        self.path, e.strerror or e)
            return
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == self._seen:
            return
        token = self._read(strict=False)
        if token is not None:  # a file caught half-written (empty) keeps the last token
            self._token = token
            self._seen = seen
            log.debug("oxia: token_file %s read again", self.path)

    def _read(self, *, strict: bool) -> str | None:
        """The token the file holds, ``None`` (or ``AuthFailed`` when ``strict``) when it holds none."""
        assert self.path is not None
        problem: str
        try:
            with open(self.path, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            problem = f"cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})"
        else:
            if _TOKEN.fullmatch(token):
                return token
            problem = "is empty" if not token else "does not hold a bearer token (printable ASCII, no spaces)"
        if strict:
            raise AuthFailed(f"oxia: token_file {self.path} {problem}")
        log.warning("oxia: token_file %s %s; keeping the token read before", self.path, problem)
        return None


def tls_failure(details: str, url: StoreURL) -> str | None:
    """One line for a TLS failure gRPC describes in ``details``, ``None`` when it is none."""
    lower = details.lower()
    if "hostname verification" in lower or "peer name" in lower:
        return "hostname mismatch: the server's certificate does not name the host it was reached at"
    if "certificate_verify_failed" in lower:
        why = re.search(r"CERTIFICATE_VERIFY_FAILED: ([^:]+)", details)
        by = f"the CA of ca={url.tls_ca}" if url.tls_ca else "the system's CAs"
        return f"untrusted certificate: {by} did not verify the server's ({why.group(1).strip() if why else 'failed'})"
    if "wrong_version_number" in lower:
        return "the server does not speak TLS (tls=true against a plaintext port?)"
    if "certificate_required" in lower or ("tsi_data_corrupted" in lower and url.tls_cert is None):
        return "the server requires a client certificate (cert= and key=)"
    if any(t in lower for t in ("alert_unknown_ca", "alert_bad_certificate", "alert_certificate_unknown",
                                "alert_certificate_expired", "alert_decrypt_error", "alert_access_denied")):
        return f"the server refused the client certificate of cert={url.tls_cert}"
    if "handshake failed" in lower:
        return "the TLS handshake failed"
    return None
