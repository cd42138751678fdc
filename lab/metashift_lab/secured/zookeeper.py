"""A local ZooKeeper 3.8 (Debian's) as production secures it: TLS on ``secureClientPort`` (Netty),
optionally client certificates required, optionally no plain ``clientPort`` at all, and SASL
(DIGEST-MD5 users, or Kerberos with a keytab from ``kdc.LocalKDC``), optionally required of every
session (``zookeeper.sessionRequireClientSASLAuth``).

What the server needs, beside ``servers.LocalZooKeeper``'s classpath:

- Netty's codec and resolver jars: Debian's ``zookeeper.jar`` manifest lists netty-buffer,
  -common, -handler, -transport and -transport-native-epoll but not netty-codec, without which
  every TLS connection fails (``NoClassDefFoundError: io/netty/handler/codec/ByteToMessageDecoder``
  in the server's log). They are in ``libnetty-java``, which ``libzookeeper-java`` depends on.
- PEM files as key and trust stores (``ssl.keyStore.type=PEM``: ZooKeeper 3.8 reads them; the key
  store is the private key and the certificate in one file, which ``start`` writes, mode 0600).
- A JAAS file (``-Djava.security.auth.login.config``) with a ``Server`` section: ZooKeeper's
  ``DigestLoginModule`` with ``user_<name>="<password>"`` lines, or ``Krb5LoginModule`` with the
  server's keytab. A ZooKeeper server speaks one SASL mechanism: GSSAPI when the ``Server``
  section logs a Kerberos principal in, else DIGEST-MD5 (``SecurityUtils.createSaslServer``).

The JAAS file holds the DIGEST-MD5 passwords (mode 0600); they are never on a command line.

Usage::

    server = LocalSecuredZooKeeper(tls=ZooKeeperTLS(cert, key, ca),
                                   sasl=DigestUsers({"metashift": "secret"}))
    server.start()
    url = server.url_for("/chroot", sasl="DIGEST-MD5", username="metashift", password_file=...)
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from metashift_lab.jvm import LEAN_JVM_FLAGS
from metashift_lab.ports import free_port
from metashift_lab.secured.kdc import LocalKDC
from metashift_lab.servers import ZOOKEEPER_CLASSPATH, ZOOKEEPER_LAB_SETTINGS, LocalZooKeeper

#: Netty jars the secure port needs that Debian's zookeeper.jar manifest omits (``libnetty-java``).
NETTY_JARS = ("/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar")
SECURED_CLASSPATH = (*ZOOKEEPER_CLASSPATH, *NETTY_JARS)


@dataclass(frozen=True)
class ZooKeeperTLS:
    """The server's TLS: its certificate and key (PEM), the CA its clients' certificates must be
    signed by (PEM), and ``client_auth``: ``need`` (a client certificate is required: ZooKeeper's
    x509 authentication), ``want`` or ``none``. ``client_cert`` / ``client_key``: a client
    certificate the lab's URLs carry (``url_for``)."""

    cert: Path
    key: Path
    ca: Path
    client_auth: str = "none"
    client_cert: Path | None = None
    client_key: Path | None = None


@dataclass(frozen=True)
class DigestUsers:
    """SASL DIGEST-MD5: the server's users and their passwords (JAAS ``user_<name>``)."""

    users: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class KerberosServer:
    """SASL GSSAPI: the KDC, and the server's principal (``service/host``) with its keytab
    (``LocalKDC.add_service`` makes both)."""

    kdc: LocalKDC
    keytab: Path
    principal: str = "zookeeper/localhost"


class LocalSecuredZooKeeper(LocalZooKeeper):
    """A standalone ZooKeeper with ``secureClientPort`` (``port``, when ``tls``), SASL (``sasl``),
    ``require_sasl`` (no session without SASL) and, with ``plain_port``, a plain ``clientPort``
    too (``self.plain_port``)."""

    name = "zookeeper-secured"

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        *,
        tls: ZooKeeperTLS | None = None,
        sasl: DigestUsers | KerberosServer | None = None,
        require_sasl: bool = False,
        plain_port: bool = False,
        four_letter_words: str = "*",
        heap_mb: int = 256,
    ) -> None:
        super().__init__(data_dir, port, heap_mb=heap_mb)
        if tls is None and not plain_port:
            plain_port = True  # no TLS: the port is the plain one
        self.tls = tls
        self.sasl = sasl
        self.require_sasl = require_sasl
        self.four_letter_words = four_letter_words
        self.plain_port: int | None = None
        if tls is not None and plain_port:
            self.plain_port = free_port()

    def _choose_ports(self) -> None:
        super()._choose_ports()
        if self.plain_port is not None:
            self.plain_port = free_port()

    # ---- what clients use -----------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The host name clients connect to: ``localhost``, the name in the server's certificate
        and in its Kerberos principal."""
        return "localhost"

    @property
    def url(self) -> str:
        return self.url_for()

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def url_for(self, root: str = "", *, host: str | None = None, **options: str | os.PathLike[str]) -> str:
        """A store URL of this server: ``root`` the chroot, ``host`` another name for it (default
        ``localhost``; ``127.0.0.1`` is not in the lab's certificates), ``options`` the query's
        (``sasl=``, ``username=``, ...) after the TLS ones (``tls``, ``ca`` and, when the TLS
        settings carry one, the client certificate; give ``ca=`` or ``cert=`` to override)."""
        query: dict[str, str] = {}
        if self.tls is not None:
            query = {"tls": "true", "ca": str(self.tls.ca)}
            if self.tls.client_cert is not None and self.tls.client_key is not None:
                query.update(cert=str(self.tls.client_cert), key=str(self.tls.client_key))
        query.update({k: str(v) for k, v in options.items()})
        query = {k: v for k, v in query.items() if v != ""}  # an option given as "" is left out
        text = f"?{urlencode(query, safe='/:')}" if query else ""
        return f"zk://{host or self.host}:{self.port}{root}{text}"

    # ---- the server -----------------------------------------------------------------------------

    def _command(self) -> list[str]:
        d = self.data_dir
        lines = [
            "tickTime=2000", f"dataDir={d / 'data'}", "admin.enableServer=false",
            f"4lw.commands.whitelist={self.four_letter_words}", "maxClientCnxns=0",
            "minSessionTimeout=2000", "maxSessionTimeout=120000", *ZOOKEEPER_LAB_SETTINGS,
        ]
        plain = self.port if self.tls is None else self.plain_port
        if plain is not None:
            lines += [f"clientPort={plain}", "clientPortAddress=127.0.0.1"]
        props = [f"-Xmx{self.heap_mb}m", *LEAN_JVM_FLAGS, "-Dzookeeper.admin.enableServer=false"]
        if self.tls is not None:
            lines += [f"secureClientPort={self.port}", "secureClientPortAddress=127.0.0.1"]
            keystore = d / "keystore.pem"  # ZooKeeper's PEM key store: key and certificate in one file
            keystore.touch(mode=0o600)
            keystore.chmod(0o600)
            keystore.write_bytes(self.tls.key.read_bytes() + b"\n" + self.tls.cert.read_bytes())
            props += [
                "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"-Dzookeeper.ssl.keyStore.location={keystore}", "-Dzookeeper.ssl.keyStore.type=PEM",
                f"-Dzookeeper.ssl.trustStore.location={self.tls.ca}", "-Dzookeeper.ssl.trustStore.type=PEM",
                f"-Dzookeeper.ssl.clientAuth={self.tls.client_auth}",
                "-Dzookeeper.authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
            ]
        if self.sasl is not None:
            props += [f"-Djava.security.auth.login.config={self._write_jaas()}",
                      "-Dzookeeper.authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"]
            if isinstance(self.sasl, KerberosServer):
                props += self.sasl.kdc.java_options()
        if self.require_sasl:
            props.append("-Dzookeeper.sessionRequireClientSASLAuth=true")
        cfg = d / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        return ["java", *props, "-cp", ":".join(SECURED_CLASSPATH),
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)]

    def _write_jaas(self) -> Path:
        path = self.data_dir / "jaas.conf"
        path.touch(mode=0o600)
        path.chmod(0o600)
        if isinstance(self.sasl, DigestUsers):
            users = "".join(f'\n  user_{name}="{_jaas_quoted(password)}"' for name, password in self.sasl.users.items())
            path.write_text(f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n")
        elif isinstance(self.sasl, KerberosServer):
            principal = self.sasl.kdc.principal(self.sasl.principal)
            path.write_text(
                "Server {\n  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n"
                f'  keyTab="{self.sasl.keytab}"\n  storeKey=true\n  useTicketCache=false\n'
                f'  principal="{principal}";\n}};\n'
            )
        return path

    def _ready(self) -> bool:
        return "Mode:" in self.four_letter("srvr")

    def four_letter(self, word: str) -> str:
        """A four-letter command's answer on the client port (over TLS on the secure port, with
        the lab's client certificate when it has one), '' when the server does not answer."""
        if self.tls is None:
            return super().four_letter(word)
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        if self.tls.client_cert is not None and self.tls.client_key is not None:
            context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw, \
                    context.wrap_socket(raw, server_hostname=self.host) as s:
                s.sendall(word.encode())
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
        except (OSError, ssl.SSLError):
            return ""


def _jaas_quoted(text: str) -> str:
    """``text`` inside a JAAS option's double quotes."""
    return text.replace("\\", "\\\\").replace('"', '\\"')
