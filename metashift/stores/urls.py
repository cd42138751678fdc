"""Store URLs: ``zk://[user:password@]h1:2181,h2:2181[/chroot][?options]``,
``etcd://[user:password@]h1:2379,h2:2379[/prefix][?options]`` and
``oxia://h1:6648[,h2:6648][/namespace[/prefix]][?options]``.

Parsing is strict and happens before any connection, so a typo never reaches a server.
Options (query string):
- every store: ``session_timeout`` (seconds, default 30), ``timeout`` (per-call seconds, default
  10); ``tls=true``, ``ca=PATH`` (the CA that signed the servers' certificates; implies TLS),
  ``cert=PATH`` and ``key=PATH`` (a client certificate: mutual TLS, ZooKeeper's x509 auth)
- zk: ``multi_read=false``: bulk reads (the copy, its verification) one request per node instead
  of ZooKeeper 3.6's multiRead (used by default when the server answers it).
  ``sync_reads=true|false``: reads follow a ``sync`` (linearizable across sessions on an
  ensemble; on by default when the URL names more than one host).
  ``sasl=DIGEST-MD5`` with ``user:password@`` or ``username=`` and ``password_file=PATH``;
  ``sasl=GSSAPI`` (Kerberos) with ``principal=NAME``, ``keytab=PATH`` (else the credential cache)
  and ``service=NAME`` (the server principal's first part, default ``zookeeper``). SASL completes
  before the session is used. ``user:password@`` without ``sasl``: ZooKeeper's digest auth.
- etcd: ``user:password@`` or ``username=`` and ``password_file=PATH`` (etcd's auth)
- oxia: ``token=TOKEN`` or ``token_file=PATH``: a bearer token sent with every call (never shown in
  logs or errors; the file is read again when it changes: OIDC tokens expire). Pulsar's form is
  ``oxia://host:port[/namespace]``, the namespace ``default`` when absent; a path below the
  namespace is metashift's own key prefix (test isolation: Oxia's namespaces are made by the
  server's operator, not by clients), like an etcd prefix.

``username`` and ``password_file`` are read at parsing into the URL's user name and password (a
password file that cannot be read fails the parse, naming the file, never what it holds).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote

from . import paths
from .errors import InvalidPath, InvalidStoreURL

SCHEMES = {"zk": 2181, "etcd": 2379, "oxia": 6648}
_COMMON_OPTIONS = {"session_timeout", "timeout", "tls", "ca", "cert", "key"}
#: Options that name a user and where the password is, folded into the URL's credentials.
_CREDENTIAL_OPTIONS = {"username", "password_file"}
#: ZooKeeper's SASL (``sasl`` names the mechanism).
_SASL_OPTIONS = {"sasl", "principal", "keytab", "service"}
_OPTIONS = {
    "zk": _COMMON_OPTIONS | {"multi_read", "sync_reads"} | _CREDENTIAL_OPTIONS | _SASL_OPTIONS,
    "etcd": _COMMON_OPTIONS | _CREDENTIAL_OPTIONS,
    "oxia": _COMMON_OPTIONS | {"token", "token_file"},
}
#: The security options an agent's ``[source]`` / ``[target]`` settings may give (over the URL's).
SECURITY_OPTIONS = ("tls", "ca", "cert", "key", "sasl", "principal", "keytab", "service", "token", "token_file")
#: ZooKeeper SASL mechanisms (``sasl=``), as ZooKeeper names them.
SASL_MECHANISMS = ("DIGEST-MD5", "GSSAPI")
#: The first part of a ZooKeeper server's Kerberos principal (``zookeeper/host@REALM``).
DEFAULT_SASL_SERVICE = "zookeeper"
#: Options that name a file the client reads (checked to exist at parsing).
_FILE_OPTIONS = ("ca", "cert", "key", "token_file", "keytab", "password_file")
#: Options whose value is a secret: shown as ``***``.
_SECRET_OPTIONS = {"token"}
#: Oxia's namespace when the URL names none (Pulsar's default too).
OXIA_DEFAULT_NAMESPACE = "default"
_NAMESPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SECRET_QUERY = re.compile(r"((?:^|[?&])token=)[^&#]*")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: scheme, hosts, root (chroot or prefix), credentials and options."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    root: str = "/"
    """ZooKeeper chroot, or etcd / Oxia key prefix: every path the store sees is relative to it."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    options: dict[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    namespace: str | None = None
    """Oxia's namespace (``default`` unless the URL names one); ``None`` for the other stores."""

    @property
    def session_timeout(self) -> float:
        return float(self.options.get("session_timeout", "30"))

    @property
    def call_timeout(self) -> float:
        return float(self.options.get("timeout", "10"))

    @property
    def multi_read(self) -> bool:
        """ZooKeeper: bulk reads may use multiRead (when the server answers it)."""
        return self.options.get("multi_read", "true").lower() in _TRUE

    @property
    def sync_reads(self) -> bool:
        """ZooKeeper: each turn's reads follow a ``sync`` sent in the same write, so that a read
        reflects every write acknowledged before it was asked for, through any server of the
        ensemble (ZooKeeper's reads are served by the server the session is on, which may lag
        the leader: sequentially consistent per session, not linearizable across sessions).
        On by default when the URL names more than one host (``sync_reads=false`` turns it off)."""
        default = "true" if len(self.hosts) > 1 else "false"
        return self.options.get("sync_reads", default).lower() in _TRUE

    @property
    def tls(self) -> bool:
        """The store is reached over TLS (``tls=true``, or a CA or client certificate named)."""
        return self.options.get("tls", "false").lower() in _TRUE or "ca" in self.options or "cert" in self.options

    @property
    def tls_ca(self) -> str | None:
        """The CA file to verify the servers with (``None``: the system's trusted CAs)."""
        return self.options.get("ca")

    @property
    def tls_cert(self) -> str | None:
        """The client certificate file (``key`` goes with it)."""
        return self.options.get("cert")

    @property
    def tls_key(self) -> str | None:
        return self.options.get("key")

    def tls_files(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(CA, client key, client certificate) as read now, for gRPC's channel credentials."""

        def read(name: str | None) -> bytes | None:
            if name is None:
                return None
            with open(name, "rb") as f:
                return f.read()

        return read(self.tls_ca), read(self.tls_key), read(self.tls_cert)

    @property
    def sasl(self) -> str | None:
        """ZooKeeper: the SASL mechanism (``DIGEST-MD5`` or ``GSSAPI``), ``None`` for none."""
        mechanism = self.options.get("sasl")
        return mechanism.upper() if mechanism else None

    @property
    def principal(self) -> str | None:
        """ZooKeeper GSSAPI: the client's Kerberos principal (``None``: the credential cache's)."""
        return self.options.get("principal")

    @property
    def keytab(self) -> str | None:
        """ZooKeeper GSSAPI: the keytab holding ``principal``'s key."""
        return self.options.get("keytab")

    @property
    def sasl_service(self) -> str:
        """ZooKeeper GSSAPI: the first part of the server's principal (``zookeeper/host@REALM``)."""
        return self.options.get("service") or DEFAULT_SASL_SERVICE

    def token(self) -> str | None:
        """Oxia: the bearer token of the URL (``token``, or read from ``token_file`` now)."""
        if "token" in self.options:
            return self.options["token"]
        name = self.options.get("token_file")
        if name is None:
            return None
        with open(name, encoding="utf-8") as f:
            return f.read().strip()

    def host_string(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts)

    def redacted(self) -> str:
        """The URL with the password hidden, for logs and error messages."""
        return self._text(secrets=False)

    def _text(self, *, secrets: bool) -> str:
        if self.username:
            cred = f"{quote(self.username, safe='')}:{quote(self.password or '', safe='')}@" if secrets else (
                f"{self.username}:***@")
        else:
            cred = ""
        root = "" if self.root == "/" else self.root
        if self.namespace is not None:
            root = f"/{self.namespace}{root}"
        query = "&".join(
            f"{k}={quote(v, safe='') if secrets else '***'}" if k in _SECRET_OPTIONS else f"{k}={v}"
            for k, v in sorted(self.options.items())
        )
        return f"{self.scheme}://{cred}{self.host_string()}{root}{'?' + query if query else ''}"

    def unredacted(self) -> str:
        """The URL with its credentials, for handing to a child process (never for a log)."""
        return self._text(secrets=True)

    def public(self) -> str:
        """The URL with no credentials at all, for what others read (the migration flag)."""
        options = {k: v for k, v in self.options.items() if k not in _SECRET_OPTIONS}
        return dataclasses.replace(self, username=None, password=None, options=options).redacted()

    def __str__(self) -> str:
        return self.redacted()

    def same_cluster(self, other: StoreURL) -> bool:
        """Both name the same servers (at least one host in common, ``localhost`` and
        ``127.0.0.1`` alike) of the same kind of store."""
        mine, theirs = {_host_key(h) for h in self.hosts}, {_host_key(h) for h in other.hosts}
        return self.scheme == other.scheme and bool(mine & theirs)

    def overlaps(self, other: StoreURL) -> bool:
        """Both reach the same nodes: the same servers (and Oxia namespace), one root at or under
        the other."""
        if not self.same_cluster(other) or self.namespace != other.namespace:
            return False
        a, b = self.root.rstrip("/") + "/", other.root.rstrip("/") + "/"
        return a.startswith(b) or b.startswith(a)


_LOCAL_NAMES = {"localhost": "127.0.0.1", "::1": "127.0.0.1", "[::1]": "127.0.0.1"}


def _host_key(host: tuple[str, int]) -> tuple[str, int]:
    name = host[0].lower()
    return _LOCAL_NAMES.get(name, name), host[1]


def parse(url: str, *, credentials: bool = True) -> StoreURL:
    """Parse and check a store URL; raise ``InvalidStoreURL`` saying what is wrong.
    ``credentials=False``: a URL as a migration's flag names it (``StoreURL.public``: its
    credentials left out, its ``sasl`` mechanism kept), to which the reader adds its own."""
    if not isinstance(url, str) or "://" not in url:
        shown = _hide(url) if isinstance(url, str) else type(url).__name__
        raise InvalidStoreURL(
            f"not a store URL (expected zk://host:port, etcd://host:port or oxia://host:port): {shown!r}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidStoreURL(f"unknown store scheme {scheme!r} (supported: zk, etcd, oxia) in {_hide(url)!r}")
    query = ""
    if "?" in rest:
        rest, query = rest.split("?", 1)
    username = password = None
    if "@" in rest.split("/", 1)[0]:
        cred, rest = _split_cred(rest)
        if ":" not in cred:
            raise InvalidStoreURL(f"credentials must be user:password in {_hide(url)!r}")
        username, password = (unquote(x) for x in cred.split(":", 1))
        if not username:
            raise InvalidStoreURL(f"empty user name in {_hide(url)!r}")
        if scheme == "oxia":
            raise InvalidStoreURL(f"oxia URLs take a bearer token (?token= or ?token_file=), not user:password: "
                                  f"{_hide(url)!r}")
    hostpart, _, root = rest.partition("/")
    namespace = None
    if scheme == "oxia":  # /namespace[/prefix]
        namespace, _, root = root.partition("/")
        namespace = namespace or OXIA_DEFAULT_NAMESPACE
        if not _NAMESPACE_NAME.fullmatch(namespace):
            raise InvalidStoreURL(f"bad oxia namespace {namespace!r} in {_hide(url)!r}")
    root = "/" + root if root else "/"
    if root != "/" and root.endswith("/"):
        root = root.rstrip("/") or "/"
    try:
        paths.validate(root)
    except InvalidPath as e:
        raise InvalidStoreURL(f"bad chroot/prefix in {_hide(url)!r}: {e}") from None
    hosts = tuple(_parse_host(h, SCHEMES[scheme], url) for h in hostpart.split(","))
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if key not in _OPTIONS[scheme]:
            raise InvalidStoreURL(
                f"unknown option {key!r} for {scheme} URL (known: {', '.join(sorted(_OPTIONS[scheme]))})"
            )
        options[key] = value
    return _checked(StoreURL(scheme, hosts, root, username, password, options, namespace), credentials=credentials)


def with_settings(url: StoreURL, settings: dict[str, str]) -> StoreURL:
    """``url`` with ``settings`` (option name -> value, as in a query string; ``username`` and
    ``password_file`` too) over its own options, checked as ``parse`` checks a URL: an agent's
    ``[source]`` / ``[target]`` settings over the URL a flag or its config names."""
    for key in settings:
        if key not in _OPTIONS[url.scheme]:
            raise InvalidStoreURL(
                f"unknown option {key!r} for {url.scheme} URL (known: {', '.join(sorted(_OPTIONS[url.scheme]))})"
            )
    options = dict(url.options)
    if "token" in settings or "token_file" in settings:  # one bearer token: the settings' wins
        options.pop("token", None)
        options.pop("token_file", None)
    options.update(settings)
    username, password = url.username, url.password
    if "username" in settings:  # the settings name the user: the URL's credentials give way
        username = password = None
    return _checked(dataclasses.replace(url, username=username, password=password, options=options))


def _checked(url: StoreURL, *, credentials: bool = True) -> StoreURL:
    """``url`` with its options checked and its credential options folded into its user name and
    password (``InvalidStoreURL`` saying what is wrong)."""
    options = dict(url.options)
    _check_options(url.scheme, options)
    username, password = url.username, url.password
    if "username" in options:
        if username is not None:
            raise InvalidStoreURL("the user name is given twice (user:password@ and username=)")
        username = options.pop("username")
        if not username:
            raise InvalidStoreURL("option username is empty")
    if "password_file" in options:
        name = options.pop("password_file")
        if username is None:
            raise InvalidStoreURL("option password_file needs a user name (username= or user@)")
        if password is not None:
            raise InvalidStoreURL("the password is given twice (user:password@ and password_file=)")
        password = _read_password(name)
    if username is not None and password is None:
        raise InvalidStoreURL(f"user {username!r} has no password (user:password@ or password_file=)")
    mechanism = url.options.get("sasl")
    if mechanism is not None:
        mechanism = mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            raise InvalidStoreURL(f"option sasl must be {' or '.join(SASL_MECHANISMS)}, not {url.options['sasl']!r}")
        options["sasl"] = mechanism
    kerberos = [k for k in ("principal", "keytab", "service") if k in options]
    if kerberos and mechanism != "GSSAPI":
        raise InvalidStoreURL(f"option {kerberos[0]} goes with sasl=GSSAPI (Kerberos)")
    if mechanism == "GSSAPI" and username is not None:
        raise InvalidStoreURL("sasl=GSSAPI authenticates with Kerberos (principal=, keytab=), not a user and password")
    if mechanism == "DIGEST-MD5" and username is None and credentials:
        raise InvalidStoreURL("sasl=DIGEST-MD5 needs a user and password (user:password@, or username= and "
                              "password_file=)")
    if "keytab" in options and not options.get("principal"):
        raise InvalidStoreURL("option keytab needs principal= (the principal whose key it holds)")
    for key in ("principal", "service"):
        if key in options and not options[key]:
            raise InvalidStoreURL(f"option {key} is empty")
    return dataclasses.replace(url, username=username, password=password, options=options)


def _read_password(name: str) -> str:
    try:
        with open(name, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    except OSError as e:
        raise InvalidStoreURL(f"option password_file: cannot read {name!r} ({e.strerror or e})") from None


def _split_cred(rest: str) -> tuple[str, str]:
    """``user:pass@hosts/root`` → (``user:pass``, ``hosts/root``); the password may hold ``@``."""
    head, slash, tail = rest.partition("/")
    cred, host = head.rsplit("@", 1)
    return cred, host + slash + tail


def _hide(url: str) -> str:
    """``url`` with any password replaced by ``***``, whatever else is wrong with it."""
    url = _SECRET_QUERY.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" not in rest.split("/", 1)[0]:
        return url
    cred, host = _split_cred(rest)
    return f"{scheme}{sep}{cred.split(':', 1)[0]}:***@{host}"


def _parse_host(text: str, default_port: int, url: str) -> tuple[str, int]:
    text = text.strip()
    if not text:
        raise InvalidStoreURL(f"empty host in {_hide(url)!r}")
    if text.startswith("["):  # [::1]:2181
        host, _, port_text = text[1:].partition("]")
        port_text = port_text.lstrip(":")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, ""
    if not host or any(c in host for c in " /\\@?#"):
        raise InvalidStoreURL(f"bad host {text!r} in {_hide(url)!r}")
    if port_text == "":
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidStoreURL(f"bad port {port_text!r} in {_hide(url)!r}")
    return host, int(port_text)


def _check_options(scheme: str, options: dict[str, str]) -> None:
    for key in ("session_timeout", "timeout"):
        if key in options:
            try:
                value = float(options[key])
            except ValueError:
                value = -1.0
            if not value > 0:
                raise InvalidStoreURL(f"option {key} must be a positive number of seconds, not {options[key]!r}")
    for key in ("tls", "multi_read", "sync_reads"):
        if key in options and options[key].lower() not in _TRUE | _FALSE:
            raise InvalidStoreURL(f"option {key} must be true or false, not {options[key]!r}")
    if "token" in options and "token_file" in options:
        raise InvalidStoreURL("options token and token_file exclude each other (one bearer token)")
    if "token" in options and not options["token"]:
        raise InvalidStoreURL("option token is empty")
    if ("cert" in options) != ("key" in options):
        raise InvalidStoreURL("options cert and key go together (client certificate and its key)")
    for key in _FILE_OPTIONS:
        if key in options and not os.path.isfile(options[key]):
            raise InvalidStoreURL(f"option {key}: no such file {options[key]!r}")
