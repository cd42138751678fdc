"""A Pulsar cluster's stores secured as production runs them (``access.StoreSetup``), and what each
member carries to reach them, by where it reaches its metadata (the operator's guide, "Secured
clusters", shows the same settings):

- the source, ZooKeeper: TLS only (``secureClientPort``, Netty) and SASL DIGEST-MD5 required of
  every session (``sessionRequireClientSASLAuth``), two users: ``pulsar`` (the members' JAAS
  ``Client`` section) and ``metashift`` (the agents' ``[source]``, the commands' ``--source``);
- the target, Oxia: TLS, and an OIDC token of the issuer on every call (one for ``metashift``, the
  agents' ``[target]`` and ``--target``; one for ``pulsar``, the members').

The members:

- on ZooKeeper directly: ZooKeeper's client TLS properties (``zookeeper_tls``), the JAAS file,
  and ``zookeeper.fips-mode=false`` (``DIGEST_MD5_CLIENT``: Pulsar 4's ZooKeeper 3.9 client does
  no DIGEST-MD5 in its default FIPS mode);
- behind their agents: the same but ``zookeeper.client.secure`` (the front serves plain TCP on
  loopback); the front completes DIGEST-MD5 with their JAAS ``Client`` section against the agent's
  ``zookeeper.sasl_users_file`` (``pulsar:<password>``) and, with ``zookeeper.require_sasl``,
  serves nobody else;
- on Oxia directly: Pulsar's Oxia client takes nothing from the URL; an Oxia client properties
  file (``enableTls``, ``authPluginClassName`` and ``authParams=file://<token file>``, read again
  at every call) named by the brokers' ``metadataStoreConfigPath`` and
  ``configurationStoreConfigPath`` and by the bookie's ``metadata-store:oxia://...?configFilePath=``
  (Pulsar 4.2: the 4.0 bookie's metadata driver reads no config file), and the CA in the JVM's
  trust store (``javax.net.ssl.trustStore``, a PKCS12 store made with ``keytool``).

Every secret is in a file of mode 0600 (passwords, the JAAS file, tokens): command lines, configs
and properties name files only.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metashift_lab.secured.oxia import OidcIssuer, OxiaTLS, SecuredOxia
from metashift_lab.secured.zookeeper import DigestUsers, LocalSecuredZooKeeper, ZooKeeperTLS

from .access import AGENT, MemberAccess, Server

#: The ZooKeeper users: the members' (their JAAS ``Client`` section) and the agents'.
MEMBER_USER = "pulsar"
AGENT_USER = "metashift"
#: The Oxia namespace the cluster lives in (Pulsar's when its URL names none).
OXIA_NAMESPACE = "default"
#: Seconds the lab's tokens are valid: longer than a run.
TOKEN_LIFETIME_S = 4 * 3600
#: The JVM property that turns ZooKeeper's client TLS on: what a member drops behind its agent.
ZK_CLIENT_SECURE = "zookeeper.client.secure"
#: Pulsar's Oxia client authentication by a bearer token (``authParams``: ``token:<token>`` or
#: ``file://<path>``, the file read again at every call).
OXIA_TOKEN_AUTH = "io.oxia.client.auth.TokenAuthentication"


@dataclass(frozen=True)
class TLSFiles:
    """A CA and a server certificate (for ``localhost`` and ``127.0.0.1``) it signed, PEM files."""

    ca: Path
    cert: Path
    key: Path


def zookeeper_tls(ca: Path) -> dict[str, str]:
    """ZooKeeper's client TLS as JVM properties (ZooKeeper 3.9's ``ZKClientConfig``, Pulsar 4's,
    reads them when Pulsar gives it no ``metadataStoreConfigPath``): Netty's socket, the CA as a
    PEM trust store (the server's name checked against the connect string's host), and TLS 1.2
    besides 1.3: a 3.9 client enables only the protocol of its context (TLSv1.3), a 3.8
    ensemble's secure port only TLSv1.2 by default (the handshake fails: ``Received fatal alert:
    protocol_version``)."""
    return {
        ZK_CLIENT_SECURE: "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.trustStore.location": str(ca),
        "zookeeper.ssl.trustStore.type": "PEM",
        "zookeeper.ssl.enabledProtocols": "TLSv1.3,TLSv1.2",
    }


#: ZooKeeper 3.9's client (Pulsar 4's) is in FIPS mode unless told otherwise, and then does no
#: DIGEST-MD5 at all ("Client will not use DIGEST-MD5 as SASL mechanism, because FIPS mode is
#: enabled"): a member of a DIGEST-MD5 ensemble carries this beside its JAAS file.
DIGEST_MD5_CLIENT = {"zookeeper.fips-mode": "false"}


def _secret(path: Path, text: str) -> Path:
    """``path`` holding ``text``, readable by its owner only (made so before anything is written)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return path


def pkcs12_trust_store(ca: Path, path: Path) -> Path:
    """A PKCS12 trust store holding ``ca``, with neither a MAC nor an encrypted certificate: the
    JVM reads it without ``javax.net.ssl.trustStorePassword`` (a store of public certificates
    has nothing to hide; keytool still asks for a password, which protects nothing here)."""
    path.unlink(missing_ok=True)
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "metashift-ca", "-file", str(ca), "-keystore", str(path),
         "-storetype", "PKCS12", "-storepass:env", "TRUST_STORE_PASSWORD",
         "-J-Dkeystore.pkcs12.certProtectionAlgorithm=NONE", "-J-Dkeystore.pkcs12.macAlgorithm=NONE"],
        check=True, capture_output=True, env={**os.environ, "TRUST_STORE_PASSWORD": "unprotected"},
    )  # fmt: skip
    return path


class SecuredPulsarStores:
    """``access.StoreSetup``: a secured ZooKeeper (``zk``) and a secured Oxia (``oxia``) with their
    credentials and what the agents and members need (the module's doc). Made in ``directory``;
    the cluster starts and removes the servers."""

    def __init__(self, directory: Path, tls: TLSFiles) -> None:
        self.directory = directory
        self.tls = tls
        kept = directory / "secrets"
        kept.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._passwords = {MEMBER_USER: secrets.token_urlsafe(18), AGENT_USER: secrets.token_urlsafe(18)}
        self.zookeeper = LocalSecuredZooKeeper(directory / "zookeeper", tls=ZooKeeperTLS(tls.cert, tls.key, tls.ca),
                                               sasl=DigestUsers(dict(self._passwords)), require_sasl=True)
        self.issuer = OidcIssuer(directory / "oidc")
        self.oxia = SecuredOxia(directory / "oxia", tls=OxiaTLS(tls.cert, tls.key, tls.ca), issuer=self.issuer)
        self.servers: dict[str, Server] = {"zk": self.zookeeper, "oxia": self.oxia}
        # the agents' and the commands' credentials
        self.password_file = _secret(kept / "zk-password", self._passwords[AGENT_USER] + "\n")
        self.agent_token = self.issuer.write_token(kept / "oxia-metashift.token", subject=AGENT_USER,
                                                   lifetime=TOKEN_LIFETIME_S)
        # the members' credentials, and the front's copy of their ZooKeeper user
        self.jaas = _secret(kept / "pulsar-jaas.conf", (
            "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{MEMBER_USER}"\n  password="{self._passwords[MEMBER_USER]}";\n}};\n'))
        self.users_file = _secret(kept / "zk-sasl-users", f"{MEMBER_USER}:{self._passwords[MEMBER_USER]}\n")
        self.member_token = self.issuer.write_token(kept / "oxia-pulsar.token", subject=MEMBER_USER,
                                                    lifetime=TOKEN_LIFETIME_S)
        self.trust_store = pkcs12_trust_store(tls.ca, kept / "truststore.p12")
        self.oxia_client = _secret(kept / "oxia-client.properties", (
            f"enableTls=true\nauthPluginClassName={OXIA_TOKEN_AUTH}\nauthParams={self.member_token.as_uri()}\n"))
        self.zookeeper_settings: dict[str, Any] = {"sasl_users_file": str(self.users_file), "require_sasl": True}
        self.target_settings: dict[str, Any] = {"tls": True, "ca": str(tls.ca), "token_file": str(self.agent_token)}
        on_zookeeper = {**zookeeper_tls(tls.ca), **DIGEST_MD5_CLIENT, "java.security.auth.login.config": str(self.jaas)}
        behind_agent = {k: v for k, v in on_zookeeper.items() if k != ZK_CLIENT_SECURE}
        on_oxia = {"javax.net.ssl.trustStore": str(self.trust_store), "javax.net.ssl.trustStoreType": "PKCS12"}
        self.members: dict[str, MemberAccess] = {
            "zk": MemberAccess(jvm_properties=on_zookeeper),
            AGENT: MemberAccess(jvm_properties=behind_agent),
            "oxia": MemberAccess(
                jvm_properties=on_oxia,
                broker_settings={"metadataStoreConfigPath": self.oxia_client,
                                 "configurationStoreConfigPath": self.oxia_client},
                bookie_uri_options={"configFilePath": str(self.oxia_client)},
            ),
        }  # fmt: skip

    def url(self, kind: str) -> str:
        """metashift's URL of the store ``kind`` as the agents' ``[source]`` and the commands name it."""
        if kind == "zk":
            return self.zookeeper.url_for(sasl="DIGEST-MD5", username=AGENT_USER, password_file=self.password_file)
        if kind == "oxia":
            return self.oxia.url(OXIA_NAMESPACE, token_file=self.agent_token)
        raise ValueError(f"no {kind} store here")

    def secrets(self) -> list[str]:
        """Every password and token of the run: none may be in a log, a config or a command line."""
        return [*self._passwords.values(), *(p.read_text().strip() for p in (self.agent_token, self.member_token))]
