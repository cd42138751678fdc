"""A local Oxia cluster that serves TLS and checks OIDC bearer tokens, as one deployed for Pulsar:
``oxia coordinator`` and two ``oxia server`` processes on loopback (``oxia standalone`` takes no
TLS nor authentication flags), and the OIDC issuer whose tokens it accepts.

The data servers take ``--tls-cert-file`` / ``--tls-key-file`` (``--tls-client-auth`` with
``--tls-trusted-ca-file`` for client certificates) and ``--auth-provider-name oidc`` with
``--auth-provider-params`` naming, per issuer, the allowed audiences and a ``staticKeyFile``: the
PEM public key the tokens' RS256 signatures are checked with (no discovery endpoint to serve).
The coordinator reads the cluster (namespaces, servers) from a file and reaches the servers'
internal ports in plaintext: loopback only, what is secured here is what a client sees.

The issuer's key pair and its tokens are made with the openssl command line (as
``tests/certs.py`` makes certificates): the lab needs no Python package for them, and the tests
may mint their own with PyJWT from ``OidcIssuer.private_key``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import grpc

from metashift.stores.oxia.proto import client_pb2 as pb
from metashift.stores.oxia.proto import client_pb2_grpc as pb_grpc
from metashift_lab.ports import accepts, free_port
from metashift_lab.servers import ServerStartError, _LocalServer, oxia_binary

#: The issuer and audience the lab's Oxia accepts unless told otherwise.
ISSUER = "https://issuer.metashift.test"
AUDIENCE = "oxia"
_INSTALL_HINT = "run make setup (it unpacks ../shared/tools/oxia into .cache/oxia) or set METASHIFT_OXIA"


@dataclass(frozen=True)
class OxiaTLS:
    """The data servers' certificate and key, the CA that signed it (and, with ``client_auth``,
    the CA client certificates must be signed by); a client certificate for the lab's own probe
    when the servers require one."""

    cert: Path
    key: Path
    ca: Path
    client_auth: bool = False
    client_cert: Path | None = None
    client_key: Path | None = None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class OidcIssuer:
    """An OIDC issuer for tests: an RSA key pair (``private_key``, ``public_key`` PEM files, the
    latter Oxia's ``staticKeyFile``) and RS256 tokens signed with it."""

    def __init__(self, directory: Path, issuer: str = ISSUER, audience: str = AUDIENCE) -> None:
        self.directory = directory
        self.issuer = issuer
        self.audience = audience
        directory.mkdir(parents=True, exist_ok=True)
        self.private_key = directory / "oidc-signing.key"
        self.public_key = directory / "oidc-signing.pub.pem"
        if not self.private_key.exists():
            _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.private_key))
            self.private_key.chmod(0o600)
            _openssl("pkey", "-in", str(self.private_key), "-pubout", "-out", str(self.public_key))

    def provider_params(self, audiences: str | None = None) -> str:
        """Oxia's ``--auth-provider-params``: this issuer, its audiences, its static key."""
        return json.dumps({"issuers": {self.issuer: {
            "allowedAudiences": audiences or self.audience, "staticKeyFile": str(self.public_key)}}})

    def token(self, *, subject: str = "metashift", audience: str | None = None, lifetime: float = 600,
              issuer: str | None = None, claims: dict[str, Any] | None = None) -> str:
        """A token signed by this issuer's key, valid for ``lifetime`` seconds from now (negative:
        expired that long ago)."""
        now = int(time.time())
        payload = {"iss": issuer or self.issuer, "sub": subject, "aud": audience or self.audience,
                   "iat": min(now, now + int(lifetime)), "exp": now + int(lifetime), **(claims or {})}
        header = {"alg": "RS256", "typ": "JWT"}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(payload).encode())}"
        signature = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.private_key)],
            input=signing_input.encode(), capture_output=True, check=True,
        ).stdout
        return f"{signing_input}.{_b64url(signature)}"

    def write_token(self, path: Path, token: str | None = None, **kwargs: Any) -> Path:
        """Write ``token`` (else a new one, ``token``'s arguments) to ``path``, mode 0600, in
        one rename: a reader sees the old token or the new one, never half of one."""
        text = token if token is not None else self.token(**kwargs)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)
        os.replace(temporary, path)
        return path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class OxiaDataServer(_LocalServer):
    """One ``oxia server``: its public port with TLS and OIDC, its internal port for the
    coordinator."""

    _install_hint = _INSTALL_HINT

    def __init__(self, data_dir: Path, index: int, tls: OxiaTLS | None, auth_params: str | None) -> None:
        self.name = f"oxia-server-{index}"
        super().__init__(data_dir, None)
        self.internal_port = free_port()
        self.metrics_port = free_port()
        self.tls = tls
        self.auth_params = auth_params

    def _choose_ports(self) -> None:
        super()._choose_ports()
        self.internal_port = free_port()
        self.metrics_port = free_port()

    @property
    def public(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def internal(self) -> str:
        return f"127.0.0.1:{self.internal_port}"

    def _command(self) -> list[str]:
        command = [
            oxia_binary() or "oxia-not-installed", "server", "-p", self.public, "-i", self.internal,
            "-m", f"127.0.0.1:{self.metrics_port}", "--data-dir", str(self.data_dir / "db"),
            "--wal-dir", str(self.data_dir / "wal"), "--log-level", "warn",
        ]
        if self.tls is not None:
            command += ["--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key)]
            if self.tls.client_auth:
                command += ["--tls-client-auth", "--tls-trusted-ca-file", str(self.tls.ca)]
        if self.auth_params is not None:
            # no secret here: the issuer, the audiences and the path of a public key
            command += ["--auth-provider-name", "oidc", "--auth-provider-params", self.auth_params]
        return command

    def _ready(self) -> bool:
        return accepts(self.port) and accepts(self.internal_port)


class OxiaCoordinator(_LocalServer):
    """The ``oxia coordinator`` of a local cluster: namespace ``default`` with ``shards`` shards
    of ``replication_factor`` replicas each (one unless told), spread over ``servers``."""

    name = "oxia-coordinator"
    _install_hint = _INSTALL_HINT

    def __init__(self, data_dir: Path, servers: list[OxiaDataServer], shards: int, replication_factor: int = 1) -> None:
        super().__init__(data_dir, None)
        self.servers = servers
        self.shards = shards
        self.replication_factor = replication_factor
        self.admin_port = free_port()
        self.metrics_port = free_port()

    def _choose_ports(self) -> None:
        super()._choose_ports()
        self.admin_port = free_port()
        self.metrics_port = free_port()

    def _command(self) -> list[str]:
        config = self.data_dir / "cluster.json"  # JSON is YAML: the file Oxia reads as YAML
        config.write_text(json.dumps({
            "namespaces": [{"name": "default", "initialShardCount": self.shards,
                            "replicationFactor": self.replication_factor}],
            "servers": [{"public": s.public, "internal": s.internal} for s in self.servers],
        }, indent=2) + "\n")
        return [
            oxia_binary() or "oxia-not-installed", "coordinator", "-i", f"127.0.0.1:{self.port}",
            "-p", f"127.0.0.1:{self.admin_port}", "-m", f"127.0.0.1:{self.metrics_port}",
            "--metadata", "file", "--file-clusters-status-path", str(self.data_dir / "cluster-status.json"),
            # deprecated for metadata.file.configName in a --sconfig file, and still read in 0.17
            "--conf", str(config), "--log-level", "warn",
        ]

    def _ready(self) -> bool:
        return accepts(self.port)


class SecuredOxia:
    """A local Oxia cluster (a coordinator, ``servers`` data servers) serving TLS (``tls``) and
    checking tokens of ``issuer`` (``None``: no authentication), namespace ``default`` with
    ``shards`` shards spread over the servers: a client is handed the other servers' addresses by
    the shard assignments, and reaches them with the same TLS and token."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        tls: OxiaTLS | None,
        issuer: OidcIssuer | None,
        servers: int = 2,
        shards: int = 4,
    ) -> None:
        self._own_dir = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="metashift-secured-oxia-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        self.issuer = issuer
        self.shards = shards
        params = issuer.provider_params() if issuer is not None else None
        self.servers = [OxiaDataServer(self.directory / f"server-{i}", i, tls, params) for i in range(servers)]
        self.coordinator = OxiaCoordinator(self.directory / "coordinator", self.servers, shards)

    @property
    def address(self) -> str:
        """The first data server's public address (a client's bootstrap host)."""
        return self.servers[0].public

    def url(self, namespace_and_prefix: str = "default", **options: str | Path) -> str:
        """An ``oxia://`` URL of the cluster with its TLS options (``ca``, and ``cert`` / ``key``
        when the servers require client certificates) and ``options`` over them (a
        ``token_file``, another ``ca``...)."""
        query: dict[str, str] = {}
        if self.tls is not None:
            query["tls"] = "true"
            query["ca"] = str(self.tls.ca)
            if self.tls.client_auth and self.tls.client_cert and self.tls.client_key:
                query["cert"], query["key"] = str(self.tls.client_cert), str(self.tls.client_key)
        query.update({k: str(v) for k, v in options.items()})
        text = "&".join(f"{k}={v}" for k, v in query.items())
        return f"oxia://{self.address}/{namespace_and_prefix.strip('/')}{'?' + text if text else ''}"

    # ---- life cycle ------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Start the data servers, then the coordinator; return once every data server tells a
        client (TLS, a token of the issuer) the leader of every shard. Oxia 0.17.1's coordinator
        pushes the assignments to a fresh data server once too early (the stream ends: EOF) and
        again after its backoff, 10 to 15 s: a cluster serves 7 to 15 s after its start."""
        if oxia_binary() is None:
            raise ServerStartError(f"no Oxia binary: {_INSTALL_HINT}")
        try:
            for server in self.servers:
                server.start(timeout)
            self.coordinator.start(timeout)
            self._wait_assigned(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_assigned(self, deadline: float) -> None:
        """Until every data server tells a client a leader for each of the ``default`` namespace's
        shards (each is told the assignments on its own: one that was not yet answers "not
        initialized" to every call)."""
        last = ""
        waiting = list(self.servers)
        while waiting and time.monotonic() < deadline:
            for component in (*self.servers, self.coordinator):
                if not component.running:
                    raise ServerStartError(f"{component.name} exited; log {component.log_path}")
            server = waiting[0]
            try:
                leaders = self._leaders(server.public, min(5.0, max(deadline - time.monotonic(), 0.1)))
                if len(leaders) == self.shards and all(leaders):
                    waiting.pop(0)
                    continue
                last = f"{server.name}: {len(leaders)} of {self.shards} shards assigned"
            except grpc.RpcError as e:
                last = f"{server.name}: {e.code().name}: {e.details()}"
            time.sleep(0.1)
        if waiting:
            raise ServerStartError(f"secured oxia: the shards got no leaders ({last}); logs in {self.directory}")

    def _leaders(self, address: str, timeout: float) -> list[str]:
        metadata: list[tuple[str, str]] = [("namespace", "default")]
        if self.issuer is not None:
            metadata.append(("authorization", f"Bearer {self.issuer.token(lifetime=60)}"))
        if self.tls is None:
            channel = grpc.insecure_channel(address)
        else:
            key = cert = None
            if self.tls.client_auth:
                key = (self.tls.client_key or self.tls.key).read_bytes()
                cert = (self.tls.client_cert or self.tls.cert).read_bytes()
            credentials = grpc.ssl_channel_credentials(self.tls.ca.read_bytes(), key, cert)
            channel = grpc.secure_channel(address, credentials)
        with channel:
            stream = pb_grpc.OxiaClientStub(channel).GetShardAssignments(
                pb.ShardAssignmentsRequest(namespace="default"), metadata=metadata, timeout=timeout)
            try:
                first = next(stream)
            finally:
                stream.cancel()
        namespace = first.namespaces.get("default")
        return [] if namespace is None else [a.leader for a in namespace.assignments]

    def stop(self) -> None:
        """Stop the coordinator, then the data servers; the data stays for a restart."""
        self.coordinator.stop()
        for server in self.servers:
            server.stop()

    def cleanup(self) -> None:
        """Stop, and remove the directory if this made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
