"""The agent's configuration: a TOML file, then ``METASHIFT_*`` environment variables, then
command-line overrides, each later source winning. Every key is checked before anything starts;
an unknown or bad key raises ``ConfigError`` naming it.

``packaging/agent.toml`` is the sample: every key, set to its default or commented out with an
example (a test checks that it names every key and nothing else).

Environment: ``METASHIFT_NODE_ID``, ``METASHIFT_ROLE``, ``METASHIFT_LISTEN``, ``METASHIFT_METRICS``,
``METASHIFT_SOURCE_URL``, ``METASHIFT_SOURCE_USERNAME``, ``METASHIFT_SOURCE_PASSWORD``, … : for
every key, ``METASHIFT_`` + the section and key in upper case joined by ``_``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metashift.agent.config_values import ConfigError, from_text, typed  # ConfigError: raised from here too
from metashift.agent.requirements import missing_for_coordinator
from metashift.agent.zookeeper.sasl_users import UsersFileError, read_users
from metashift.migration.settings import COPY_ENGINES, CoordinatorSettings
from metashift.stores import StoreURL, parse_url, reserved
from metashift.stores.errors import InvalidPath, InvalidStoreURL
from metashift.stores.urls import SECURITY_OPTIONS, with_settings

ROLES = ("broker", "bookie")
#: Longest unix socket path the OS takes (sun_path is 108 bytes with its terminating NUL).
MAX_SOCKET_PATH_BYTES = 107
ENV_PREFIX = "METASHIFT_"


@dataclass(frozen=True)
class Listen:
    """Where the agent serves: a unix socket path or a TCP host:port."""

    kind: str  # "unix" | "tcp"
    address: str
    """Socket path for unix; host:port for tcp."""


@dataclass(frozen=True)
class TLSConfig:
    """The server's TLS files for a tcp:// listen address (mutual TLS with ``client_ca``)."""

    cert: Path | None = None
    key: Path | None = None
    client_ca: Path | None = None
    allow_insecure_tcp: bool = False


@dataclass(frozen=True)
class StoreSecurity:
    """A ``[source]`` or ``[target]`` section's security settings, as URL options
    (``metashift.stores.urls.SECURITY_OPTIONS``): set ones only."""

    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def settings(self) -> dict[str, str]:
        return dict(self.options)

    def names(self) -> list[str]:
        """The settings given (never their values: ``token`` is a secret)."""
        return [k for k, _ in self.options]


@dataclass(frozen=True)
class AgentConfig:
    """Every setting of one agent, checked."""

    source: StoreURL
    node_id: str = field(default_factory=socket.gethostname)
    role: str = "broker"
    listen: Listen = Listen("unix", "/run/metashift/agent.sock")
    socket_mode: int = 0o660
    metrics: str = ""
    log_level: str = "info"
    tls: TLSConfig = TLSConfig()
    hold_timeout: float = 30.0
    drain_timeout: float = 30.0
    session_timeout: float = 10.0
    session_max_timeout: float = 60.0
    auth_token_file: Path | None = None
    """Callers must present this file's token as ``authorization: Bearer <token>``."""
    target_username: str | None = None
    """Credentials for the migration target (the flag names the target, never its secrets)."""
    target_password: str | None = field(default=None, repr=False)
    target_security: StoreSecurity = field(default_factory=lambda: StoreSecurity())
    """The ``[target]`` security settings (TLS files, SASL, Kerberos, Oxia token): applied to the
    target a flag names, over the flag's own options."""
    coordinator: CoordinatorSettings = field(default_factory=lambda: CoordinatorSettings())
    zookeeper_listen: str = ""
    """host:port where ZooKeeper's client protocol is served ("" = not served). Loopback unless
    TLS is configured (tls.cert, tls.key: served with TLS) or tls.allow_insecure_tcp."""
    zookeeper_sasl_users_file: Path | None = None
    """The front's DIGEST-MD5 users (``user:password`` a line, mode 0600 or stricter): a member
    whose JVM has a JAAS ``Client`` section completes SASL against them."""
    zookeeper_sasl_users: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Those users and their passwords, read at start (never shown)."""
    zookeeper_require_sasl: bool = False
    """The front refuses every request of a connection that did not complete SASL (ZooKeeper's
    ``sessionRequireClientSASLAuth``)."""
    migration_root: str = reserved.DEFAULT_ROOT
    """Where the migration keeps its nodes in every store (``metashift.stores.reserved``): the
    same for every agent and command of a cluster."""
    session_state_dir: Path | None = Path("/run/metashift")
    """Where the agent keeps what its members' sessions need to survive its restart (a tmpfs;
    ``agent.core.handover``). ``None`` (the setting empty): no state kept, a restart or a stop
    ends every session."""


#: Every key -> its kind (``config_values``), which reads it from the environment and the command line.
SCHEMA: dict[str, str] = {
    "node_id": "str",
    "role": "str",
    "listen": "str",
    "socket_mode": "str",
    "metrics": "str",
    "log_level": "str",
    "source.url": "str",
    "source.username": "str",
    "source.password": "str",
    "source.password_file": "str",
    **{f"source.{k}": ("bool" if k == "tls" else "str") for k in SECURITY_OPTIONS},
    "tls.cert": "str",
    "tls.key": "str",
    "tls.client_ca": "str",
    "tls.allow_insecure_tcp": "bool",
    "auth.token_file": "str",
    "gate.hold_timeout": "float",
    "gate.drain_timeout": "float",
    "session.timeout": "float",
    "session.max_timeout": "float",
    "session.state_dir": "str",
    "target.username": "str",
    "target.password": "str",
    "target.password_file": "str",
    **{f"target.{k}": ("bool" if k == "tls" else "str") for k in SECURITY_OPTIONS},
    "coordinator.enabled": "bool",
    "coordinator.prepare_timeout": "float",
    "coordinator.participant_timeout": "float",
    "coordinator.outage_timeout": "float",
    "coordinator.spark_master": "str",
    "coordinator.copy_engine": "str",
    "coordinator.spark_delta_threshold": "count",
    "coordinator.ledgers_roots": "paths",
    "coordinator.counters": "paths",
    "zookeeper.listen": "str",
    "zookeeper.sasl_users_file": "str",
    "zookeeper.require_sasl": "bool",
    "migration.root": "str",
}
_LOG_LEVELS = ("debug", "info", "warning", "error")


def env_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", "_").upper()


def load(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """Read the file (optional), apply the environment and ``overrides`` (flat keys such as
    ``"source.url"``; ``None`` values are ignored) and check everything."""
    flat: dict[str, Any] = {}
    if path is not None:
        flat.update(_read_file(Path(path)))
    environ = os.environ if env is None else env
    for key, kind in SCHEMA.items():
        name = env_name(key)
        if name in environ:
            flat[key] = from_text(key, kind, environ[name])
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in SCHEMA:
            raise ConfigError(key, "unknown key")
        flat[key] = from_text(key, SCHEMA[key], value) if isinstance(value, str) else value
    return build(flat)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("--config", f"no such file {str(path)!r}") from None
    except IsADirectoryError:
        raise ConfigError("--config", f"{str(path)!r} is a directory, not a TOML file") from None
    except OSError as e:
        raise ConfigError("--config", f"cannot read {str(path)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError("--config", f"{path} is not UTF-8 text: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("--config", f"{path} is not valid TOML: {e}") from None
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                full = f"{key}.{sub}"
                if isinstance(subvalue, dict):
                    raise ConfigError(f"{full}", "unknown section")
                flat[full] = subvalue
        else:
            flat[key] = value
    for key in flat:
        if key not in SCHEMA:
            section = key.split(".", 1)[0]
            sections = {k.split(".", 1)[0] for k in SCHEMA if "." in k}
            if "." in key and section not in sections:
                raise ConfigError(key, f"unknown section [{section}]")
            raise ConfigError(key, "unknown key")
    return flat


def build(flat: Mapping[str, Any]) -> AgentConfig:
    """Check a flat mapping of keys and make the config."""
    values = {key: typed(key, SCHEMA[key], value) for key, value in flat.items() if key in SCHEMA}
    for key in flat:
        if key not in SCHEMA:
            raise ConfigError(key, "unknown key")
    kwargs: dict[str, Any] = {"source": _source(values)}
    if values.get("node_id") is not None:
        node_id = values["node_id"].strip()
        if not node_id or any(c in node_id for c in "/ \t\n"):
            raise ConfigError("node_id", f"must be a non-empty name without '/' or spaces, not {values['node_id']!r}")
        kwargs["node_id"] = node_id
    if "role" in values:
        if values["role"] not in ROLES:
            raise ConfigError("role", f"must be one of {', '.join(ROLES)}, not {values['role']!r}")
        kwargs["role"] = values["role"]
    if "socket_mode" in values:
        try:
            mode = int(values["socket_mode"], 8)
        except ValueError:
            mode = -1
        if not 0 <= mode <= 0o777:
            raise ConfigError("socket_mode", f"must be an octal file mode such as 0660, not {values['socket_mode']!r}")
        kwargs["socket_mode"] = mode
    if "log_level" in values:
        if values["log_level"].lower() not in _LOG_LEVELS:
            raise ConfigError("log_level", f"must be one of {', '.join(_LOG_LEVELS)}")
        kwargs["log_level"] = values["log_level"].lower()
    if "metrics" in values:
        if values["metrics"]:
            _host_port("metrics", values["metrics"])
        kwargs["metrics"] = values["metrics"]
    tls = TLSConfig(
        cert=_file(values, "tls.cert"),
        key=_file(values, "tls.key"),
        client_ca=_file(values, "tls.client_ca"),
        allow_insecure_tcp=values.get("tls.allow_insecure_tcp", False),
    )
    if (tls.cert is None) != (tls.key is None):
        raise ConfigError("tls.key" if tls.key is None else "tls.cert", "tls.cert and tls.key go together")
    if tls.client_ca is not None and tls.cert is None:
        raise ConfigError("tls.client_ca", "mutual TLS needs tls.cert and tls.key too")
    kwargs["tls"] = tls
    token_file = _file(values, "auth.token_file")
    if token_file is not None:
        try:
            token = token_file.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError("auth.token_file", f"cannot read {str(token_file)!r}: {e}") from None
        if not token.strip():
            raise ConfigError("auth.token_file", f"{str(token_file)!r} holds no token")
        kwargs["auth_token_file"] = token_file
    if "listen" in values:
        kwargs["listen"] = _listen(values["listen"], tls)
    elif tls.cert is not None:
        raise ConfigError("listen", "TLS is configured but listen is a unix socket (use tcp://host:port)")
    for key, attr in (
        ("gate.hold_timeout", "hold_timeout"),
        ("gate.drain_timeout", "drain_timeout"),
        ("session.timeout", "session_timeout"),
        ("session.max_timeout", "session_max_timeout"),
    ):
        if key in values:
            kwargs[attr] = values[key]
    if "session.state_dir" in values:
        text = values["session.state_dir"].strip()
        if text and not text.startswith("/"):
            raise ConfigError("session.state_dir", f"must be an absolute path (or empty: keep no state), not {text!r}")
        kwargs["session_state_dir"] = Path(text) if text else None
    kwargs["target_username"], kwargs["target_password"] = _credentials(values, "target", None, None)
    kwargs["target_security"] = _security(values, "target")
    coordinator = CoordinatorSettings()
    for attr in ("enabled", "prepare_timeout", "participant_timeout", "outage_timeout", "spark_master",
                 "copy_engine", "spark_delta_threshold", "ledgers_roots", "counters"):
        if values.get(f"coordinator.{attr}") not in (None, ""):
            coordinator = dataclasses.replace(coordinator, **{attr: values[f"coordinator.{attr}"]})
    if coordinator.copy_engine not in COPY_ENGINES:
        raise ConfigError("coordinator.copy_engine",
                          f"must be one of {', '.join(COPY_ENGINES)}, not {coordinator.copy_engine!r}")
    if coordinator.enabled and (missing := missing_for_coordinator()) is not None:
        raise ConfigError("coordinator.enabled", f"is true but {missing}")
    kwargs["coordinator"] = coordinator
    if values.get("zookeeper.listen"):
        kwargs["zookeeper_listen"] = _zookeeper_listen(values["zookeeper.listen"], tls)
    kwargs.update(_zookeeper_sasl(values))
    if values.get("migration.root"):
        try:
            kwargs["migration_root"] = reserved.check_root(values["migration.root"])
        except InvalidPath as e:
            raise ConfigError("migration.root", str(e)) from None
    config = AgentConfig(**kwargs)
    if config.session_timeout > config.session_max_timeout:
        raise ConfigError("session.timeout", "must not exceed session.max_timeout")
    return config


def _source(values: dict[str, Any]) -> StoreURL:
    if not values.get("source.url"):
        raise ConfigError("source.url", "missing: the URL of the metadata store (zk://... or etcd://...)")
    try:
        url = parse_url(values["source.url"])
    except InvalidStoreURL as e:
        raise ConfigError("source.url", str(e)) from None
    username, password = _credentials(values, "source", url.username, url.password)
    url = dataclasses.replace(url, username=username, password=password, options=dict(url.options))
    security = _security(values, "source")
    if security.options:
        try:
            url = with_settings(url, security.settings())
        except InvalidStoreURL as e:
            raise ConfigError(f"source.{security.names()[0]}" if len(security.names()) == 1 else "source",
                              str(e)) from None
    return url


def _security(values: dict[str, Any], section: str) -> StoreSecurity:
    """``section``'s security settings as URL options (``tls`` as ``true``/``false``)."""
    options: list[tuple[str, str]] = []
    for key in SECURITY_OPTIONS:
        value = values.get(f"{section}.{key}")
        if value is None or value == "":
            continue
        if key == "tls":
            value = "true" if value else "false"
        options.append((key, str(value)))
    return StoreSecurity(tuple(options))


def _credentials(
    values: dict[str, Any], section: str, username: str | None, password: str | None
) -> tuple[str | None, str | None]:
    """``section``'s user name and password (the password possibly from a file), over the URL's."""
    username = values.get(f"{section}.username") or username
    password = values.get(f"{section}.password") or password
    password_file = values.get(f"{section}.password_file")
    if password_file:
        try:
            password = Path(password_file).read_text().rstrip("\n")
        except OSError as e:
            raise ConfigError(f"{section}.password_file", f"cannot read {password_file!r}: {e.strerror}") from None
    if (password is not None) and not username:
        raise ConfigError(f"{section}.username", "a password is set but no user name")
    if username and password is None:
        raise ConfigError(f"{section}.password", f"user {username!r} is set but no password")
    return username, password


def _file(values: dict[str, Any], key: str) -> Path | None:
    if not values.get(key):
        return None
    path = Path(values[key])
    if not path.is_file():
        raise ConfigError(key, f"no such file {str(path)!r}")
    return path


def _host_port(key: str, text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(key, f"must be host:port, not {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _listen(text: str, tls: TLSConfig) -> Listen:
    if text.startswith("/"):  # a bare absolute path can only mean a unix socket
        text = "unix:" + text
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/"):
            raise ConfigError("listen", f"a unix socket needs an absolute path, not {text!r}")
        size = len(path.encode("utf-8", "surrogateescape"))
        if size > MAX_SOCKET_PATH_BYTES:
            raise ConfigError(
                "listen", f"the unix socket path is {size} bytes long, over the OS limit of "
                f"{MAX_SOCKET_PATH_BYTES}: {path}",
            )
        return Listen("unix", path)
    if text.startswith("tcp://"):
        address = text[len("tcp://") :]
        _host_port("listen", address)
        if tls.cert is None and not tls.allow_insecure_tcp:
            raise ConfigError("listen", "a tcp:// address needs TLS: set tls.cert and tls.key (and tls.client_ca)")
        return Listen("tcp", address)
    raise ConfigError("listen", f"must be unix:/path/to.sock (or /path/to.sock) or tcp://host:port, not {text!r}")


_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _zookeeper_listen(text: str, tls: TLSConfig) -> str:
    """host:port of the ZooKeeper front: loopback, or anything else with TLS (or, for tests,
    tls.allow_insecure_tcp), as for the gRPC TCP listener."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError("zookeeper.listen", f"must be host:port (port 0: any free port), not {text!r}")
    host = host.strip("[]")
    if host not in _LOOPBACK and host.split("%")[0] not in _LOOPBACK and not host.startswith("127."):
        if tls.cert is None and not tls.allow_insecure_tcp:
            raise ConfigError(
                "zookeeper.listen", f"{text!r} is not a loopback address: set tls.cert and tls.key (served with TLS)"
            )
    return text.strip()


def _zookeeper_sasl(values: dict[str, Any]) -> dict[str, Any]:
    """The front's SASL settings: its users file read and checked now (its mode too), so that a
    bad one stops the agent before it serves."""
    out: dict[str, Any] = {}
    if values.get("zookeeper.sasl_users_file"):
        path = Path(values["zookeeper.sasl_users_file"])
        try:
            users = read_users(path)
        except UsersFileError as e:
            raise ConfigError("zookeeper.sasl_users_file", str(e)) from None
        out["zookeeper_sasl_users_file"] = path
        out["zookeeper_sasl_users"] = tuple(sorted(users.items()))
    if values.get("zookeeper.require_sasl"):
        if "zookeeper_sasl_users_file" not in out:
            raise ConfigError("zookeeper.require_sasl", "is true but no zookeeper.sasl_users_file names a user")
        out["zookeeper_require_sasl"] = True
    return out


def summary(config: AgentConfig) -> str:
    """What an agent with ``config`` would do, in a few lines (``metashift agent --check-config``;
    no secret shown)."""
    c = config.coordinator
    lines = [
        f"configuration ok: agent {config.node_id} ({config.role})",
        f"  source          {config.source.redacted()}",
        f"  listen          {config.listen.kind}:{config.listen.address}"
        + (f", ZooKeeper's protocol on {config.zookeeper_listen}" if config.zookeeper_listen else "")
        + (f" (SASL DIGEST-MD5: {len(config.zookeeper_sasl_users)} user(s)"
           + (", required)" if config.zookeeper_require_sasl else ")") if config.zookeeper_sasl_users else ""),
        f"  metrics         {config.metrics or 'off'}",
        f"  coordinator     {'a candidate' if c.enabled else 'never (coordinator.enabled = false)'}"
        + (f", Spark {c.spark_master}" if c.enabled else ""),
        f"  migration root  {config.migration_root}",
        f"  session state   {config.session_state_dir or 'none (a restart ends every session)'}",
        f"  target creds    {'set' if config.target_username else 'none (the source credentials for a way back)'}",
        f"  target security {', '.join(config.target_security.names()) or 'none (the options the flag names)'}",
    ]
    return "\n".join(lines)

