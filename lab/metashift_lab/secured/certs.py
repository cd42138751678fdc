"""Throw-away TLS certificates for the lab's secured servers (the benchmarks, which import no test):
a CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, made with the
openssl command line as ``tests/certs.py`` makes the tests' (the lab needs no Python package)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LabCertificates:
    """The files ``make_certificates`` wrote (PEM; the keys mode 0600)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory: Path, days: int = 2) -> LabCertificates:
    """A CA, a server certificate (``IP:127.0.0.1``, ``DNS:localhost``) and a client certificate
    signed by it, written to ``directory``."""
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days), "-subj", "/CN=metashift-lab-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, cn in (("server", "localhost"), ("client", "metashift-client")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", str(days), "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)
    for key in ("ca.key", "server.key", "client.key"):
        (d / key).chmod(0o600)
    return LabCertificates(ca=d / "ca.pem", server_cert=d / "server.pem", server_key=d / "server.key",
                           client_cert=d / "client.pem", client_key=d / "client.key")
