"""Throw-away TLS certificates for the lab's secured servers, the tests and the benchmarks: a CA,
a server certificate for 127.0.0.1 and localhost, a client certificate, a second CA that signed
nothing anyone trusts, and more host certificates on demand, made with the openssl command line
(the lab needs no Python package for them)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    """The files ``make_certificates`` wrote (PEM; the keys mode 0600)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A CA that signed nothing we trust: for "wrong CA" tests."""


#: The name the benchmarks knew it by.
LabCertificates = Certificates


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory: Path, days: int = 2) -> Certificates:
    """A CA, a server certificate (``IP:127.0.0.1``, ``DNS:localhost``) and a client certificate
    signed by it, and another CA, written to ``directory``."""
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days), "-subj", f"/CN=metashift-{ca}",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    # the client's name is its identity where the server maps certificates to users (ZooKeeper's x509)
    for name, cn in (("server", "localhost"), ("client", "metashift-client")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", str(days), "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)
    for key in ("ca.key", "other-ca.key", "server.key", "client.key"):
        (d / key).chmod(0o600)
    return Certificates(
        ca=d / "ca.pem", server_cert=d / "server.pem", server_key=d / "server.key",
        client_cert=d / "client.pem", client_key=d / "client.key", other_ca=d / "other-ca.pem",
    )


def host_certificate(certs: Certificates, name: str, dns: tuple[str, ...] = ("localhost",),
                     ips: tuple[str, ...] = (), days: int = 2) -> tuple[Path, Path]:  # fmt: skip
    """Another server certificate signed by ``certs``' CA, valid for the ``dns`` names and ``ips``
    only (a certificate for ``localhost`` alone: a client that dials 127.0.0.1 sees a hostname
    mismatch): (certificate, key), files ``<name>.pem`` and ``<name>.key`` beside the CA's."""
    d = certs.ca.parent
    names = [f"DNS:{n}" for n in dns] + [f"IP:{ip}" for ip in ips]
    (d / f"{name}.ext").write_text(f"subjectAltName={','.join(names)}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={dns[0] if dns else ips[0]}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", str(days), "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)
    (d / f"{name}.key").chmod(0o600)
    return d / f"{name}.pem", d / f"{name}.key"
