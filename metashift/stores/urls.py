"""Store URLs: ``zk://[user:password@]h1:2181,h2:2181[/chroot][?options]``,
``etcd://[user:password@]h1:2379,h2:2379[/prefix][?options]`` and
``oxia://h1:6648[,h2:6648][/namespace[/prefix]][?options]``.

Parsing is strict and happens before any connection, so a typo never reaches a server.
Options (query string):
- both: ``session_timeout`` (seconds, default 30), ``timeout`` (per-call seconds, default 10)
- zk: ``multi_read=false``: bulk reads (the copy, its verification) one request per node instead
  of ZooKeeper 3.6's multiRead (used by default when the server answers it)
- etcd: ``tls=true``, ``ca=PATH``, ``cert=PATH``, ``key=PATH`` (mutual TLS when cert+key given)
- oxia: ``token=TOKEN`` or ``token_file=PATH``: a bearer token sent with every call (never shown in
  logs or errors). Pulsar's form is ``oxia://host:port[/namespace]``, the namespace ``default``
  when absent; a path below the namespace is metashift's own key prefix (test isolation: Oxia's
  namespaces are made by the server's operator, not by clients), like an etcd prefix.
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
_COMMON_OPTIONS = {"session_timeout", "timeout"}
_OPTIONS = {
    "zk": _COMMON_OPTIONS | {"multi_read"},
    "etcd": _COMMON_OPTIONS | {"tls", "ca", "cert", "key"},
    "oxia": _COMMON_OPTIONS | {"token", "token_file"},
}
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
    def tls(self) -> bool:
        return self.options.get("tls", "false").lower() in _TRUE or "ca" in self.options

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


def parse(url: str) -> StoreURL:
    """Parse and check a store URL; raise ``InvalidStoreURL`` saying what is wrong."""
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
    _check_options(scheme, options)
    return StoreURL(scheme, hosts, root, username, password, options, namespace)


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
    for key in ("tls", "multi_read"):
        if key in options and options[key].lower() not in _TRUE | _FALSE:
            raise InvalidStoreURL(f"option {key} must be true or false, not {options[key]!r}")
    if "token" in options and "token_file" in options:
        raise InvalidStoreURL("options token and token_file exclude each other (one bearer token)")
    if "token" in options and not options["token"]:
        raise InvalidStoreURL("option token is empty")
    if ("cert" in options) != ("key" in options):
        raise InvalidStoreURL("options cert and key go together (client certificate and its key)")
    for key in ("ca", "cert", "key", "token_file"):
        if key in options and not os.path.isfile(options[key]):
            raise InvalidStoreURL(f"option {key}: no such file {options[key]!r}")
