"""Throw-away TLS certificates for tests: the lab's (``metashift_lab.secured.certs``), one maker
for the tests, the lab's secured servers and the benchmarks."""

from __future__ import annotations

from metashift_lab.secured.certs import Certificates, host_certificate, make_certificates

__all__ = ["Certificates", "host_certificate", "make_certificates"]
