"""Secured ZooKeeper servers for the tests (session fixtures, one server of each kind per run):

- ``tls_zk``: TLS only (``secureClientPort``, no plain port, no SASL);
- ``digest_zk``: TLS and SASL DIGEST-MD5, required of every session (``sessionRequireClientSASLAuth``);
- ``kerberos_zk``: TLS with client certificates required (x509) and SASL GSSAPI, required, with a
  real MIT KDC (``kerberos``: the KDC, its principals and keytabs; ``KRB5_CONFIG`` set in this
  process's environment for the run, as MIT's library reads it).

Every server's certificate names ``localhost`` only (not 127.0.0.1: a URL that dials the address
sees a hostname mismatch). A test module imports the fixtures it uses by name."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metashift_lab.secured.kdc import LocalKDC
from metashift_lab.secured.zookeeper import DigestUsers, KerberosServer, LocalSecuredZooKeeper, ZooKeeperTLS
from tests.certs import Certificates, host_certificate, make_certificates
from tests.harness import require_part

USER = "metashift"
PASSWORD = "Zk-s3cret-Pa55"
"""The DIGEST-MD5 user's password: the tests look for it in every error and log line."""


@dataclass(frozen=True)
class SecuredCerts:
    """The test CA's certificates, and the servers' (``localhost`` only)."""

    certs: Certificates
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class DigestZooKeeper:
    """A TLS + DIGEST-MD5 (required) ZooKeeper and its user's password files (right and wrong)."""

    server: LocalSecuredZooKeeper
    password_file: Path
    wrong_password_file: Path

    def url(self, root: str = "", **options: str | os.PathLike[str]) -> str:
        """The user's URL (``options`` over the SASL ones)."""
        settings: dict[str, Any] = {"sasl": "DIGEST-MD5", "username": USER, "password_file": self.password_file}
        return self.server.url_for(root, **{**settings, **options})


@dataclass(frozen=True)
class Kerberos:
    """The KDC and the keytabs the tests use (``principal`` -> keytab)."""

    kdc: LocalKDC
    keytabs: dict[str, Path]
    stale_keytab: Path
    """``stale``'s keytab from before its keys changed: a wrong keytab."""
    gone_keytab: Path
    """The keytab of ``gone``, a principal deleted since: unknown to the KDC."""


@pytest.fixture(scope="session")
def secured_certs(tmp_path_factory: pytest.TempPathFactory) -> SecuredCerts:
    certs = make_certificates(tmp_path_factory.mktemp("zk-secured-certs"))
    cert, key = host_certificate(certs, "zk-localhost", dns=("localhost",))
    return SecuredCerts(certs, cert, key)


def _started(server: LocalSecuredZooKeeper) -> Iterator[LocalSecuredZooKeeper]:
    if shutil.which("java") is None:
        require_part("java (Debian's default-jre-headless: make setup) for ZooKeeper")
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def tls_zk(secured_certs: SecuredCerts) -> Iterator[LocalSecuredZooKeeper]:
    tls = ZooKeeperTLS(secured_certs.server_cert, secured_certs.server_key, secured_certs.certs.ca)
    yield from _started(LocalSecuredZooKeeper(tls=tls))


@pytest.fixture(scope="session")
def digest_zk(secured_certs: SecuredCerts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DigestZooKeeper]:
    d = tmp_path_factory.mktemp("zk-digest")
    right, wrong = d / "password", d / "wrong-password"
    for path, text in ((right, PASSWORD), (wrong, PASSWORD + "-not")):
        path.write_text(text + "\n")
        path.chmod(0o600)
    tls = ZooKeeperTLS(secured_certs.server_cert, secured_certs.server_key, secured_certs.certs.ca)
    server = LocalSecuredZooKeeper(tls=tls, sasl=DigestUsers({USER: PASSWORD, "other": "other-pw"}),
                                   require_sasl=True)
    for started in _started(server):
        yield DigestZooKeeper(started, right, wrong)


@pytest.fixture(scope="session")
def kerberos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kerberos]:
    if shutil.which("krb5kdc") is None and not os.access("/usr/sbin/krb5kdc", os.X_OK):
        require_part("an MIT KDC (Debian's krb5-kdc, krb5-admin-server: make setup)")
    kdc = LocalKDC(tmp_path_factory.mktemp("kdc"))
    keytabs = {name: kdc.add_principal(name) for name in ("alice", "bob", "carol", "dave")}
    keytabs["zookeeper/localhost"] = kdc.add_service("zookeeper", "localhost")
    stale = kdc.add_principal("stale", kdc.data_dir / "stale-old.keytab")
    kdc.export_keytab("stale")  # new keys: the first keytab is stale
    gone = kdc.add_principal("gone")
    kdc.delete_principal("gone")
    saved = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = str(kdc.krb5_conf)  # for this process's client, as MIT reads it
    try:
        kdc.start()
        yield Kerberos(kdc, keytabs, stale, gone)
    finally:
        kdc.cleanup()
        if saved is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = saved


@pytest.fixture(scope="session")
def kerberos_zk(secured_certs: SecuredCerts, kerberos: Kerberos) -> Iterator[LocalSecuredZooKeeper]:
    certs = secured_certs.certs
    tls = ZooKeeperTLS(secured_certs.server_cert, secured_certs.server_key, certs.ca, client_auth="need",
                       client_cert=certs.client_cert, client_key=certs.client_key)
    sasl = KerberosServer(kerberos.kdc, kerberos.keytabs["zookeeper/localhost"])
    yield from _started(LocalSecuredZooKeeper(tls=tls, sasl=sasl, require_sasl=True))
