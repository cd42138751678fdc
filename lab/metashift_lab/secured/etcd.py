"""A local etcd with TLS and ``auth enable``, set up with etcdctl as an operator would: ``root``,
and a user whose role grants only the cluster's key prefix.

A store URL ``etcd://h:2379/pulsar`` reads and writes the key ``/pulsar`` (its root node, the
counter of its top-level sequential nodes) and the keys under ``/pulsar/``, nothing else: the
role grants exactly these (``prefix_grants``), not ``--prefix /pulsar``, which would also grant
``/pulsar2/...``. Passwords reach etcdctl on its standard input and in its environment
(``ETCDCTL_PASSWORD``), and the stores through a ``password_file`` of mode 0600: never on a
command line.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from metashift_lab.servers import EtcdTLS, LocalEtcd

#: The user and role the lab grants the cluster's prefix.
USER = "metashift"
ROLE = "metashift-prefix"


@dataclass(frozen=True)
class EtcdUser:
    """An etcd user, its password, and the file (mode 0600) a store URL reads the password from."""

    name: str
    password: str = field(repr=False)
    password_file: Path


def prefix_grants(role: str, prefix: str, permission: str = "readwrite") -> list[list[str]]:
    """The etcdctl arguments that grant ``role`` ``permission`` (read, write, readwrite) on what a
    store URL with ``prefix`` uses: the prefix's own key and every key below ``prefix/``."""
    prefix = "/" + prefix.strip("/")
    return [
        ["role", "grant-permission", role, permission, prefix],
        ["role", "grant-permission", "--prefix=true", role, permission, prefix + "/"],
    ]


class SecuredEtcd:
    """A single-member etcd with TLS (``tls``) and authentication on: ``root`` (role root) and
    ``user`` with a role granting only ``prefix`` (``prefix_grants``). ``auth_token_ttl``: the
    seconds etcd's simple tokens live (etcd's ``--auth-token-ttl``, 300 by default)."""

    def __init__(
        self,
        tls: EtcdTLS,
        directory: Path,
        prefix: str = "/pulsar",
        *,
        user: str = USER,
        auth_token_ttl: int | None = None,
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prefix = "/" + prefix.strip("/")
        extra = ["--auth-token", "simple"]
        if auth_token_ttl is not None:
            extra += ["--auth-token-ttl", str(auth_token_ttl)]
        self.server = LocalEtcd(directory / "etcd", tls=tls, extra_args=extra)
        self.tls = tls
        self.root = self._new_user("root")
        self.user = self._new_user(user)

    # ---- life cycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start etcd, add root, the prefix's role and user, then ``auth enable``."""
        self.server.start()
        try:
            self.add_user(self.root)
            self.etcdctl("user", "grant-role", "root", "root")
            self.add_user(self.user, role=ROLE, prefix=self.prefix)
            self.etcdctl("auth", "enable")
        except BaseException:
            self.server.cleanup()
            raise

    def stop(self) -> None:
        """Stop etcd and remove its data."""
        self.server.cleanup()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- users -----------------------------------------------------------------------------------

    def _new_user(self, name: str) -> EtcdUser:
        password = secrets.token_urlsafe(18)
        path = self.directory / f"{name}.password"
        # created 0600 before the secret is written: never readable by others, not even briefly
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
        return EtcdUser(name, password, path)

    def add_user(
        self, user: EtcdUser, *, role: str | None = None, prefix: str | None = None, permission: str = "readwrite"
    ) -> None:
        """``etcdctl user add`` (the password on stdin); with ``role``, that role made, granted
        ``permission`` on ``prefix`` (``prefix_grants``; default: the cluster's) and given to the
        user. Before ``auth enable`` or after it (then as root)."""
        self.etcdctl("user", "add", user.name, "--interactive=false", stdin=user.password + "\n")
        if role is not None:
            self.etcdctl("role", "add", role)
            for grant in prefix_grants(role, prefix or self.prefix, permission):
                self.etcdctl(*grant)
            self.etcdctl("user", "grant-role", user.name, role)

    def other_user(self, name: str, prefix: str | None = None, permission: str = "readwrite") -> EtcdUser:
        """Another user (added as root) whose own role grants ``permission`` on ``prefix`` only
        (default: the cluster's): one without permission on this cluster, or reading only."""
        user = self._new_user(name)
        self.add_user(user, role=f"{name}-prefix", prefix=prefix, permission=permission)
        return user

    def etcdctl(self, *args: str, as_user: EtcdUser | None = None, stdin: str | None = None) -> str:
        """Run etcdctl on this etcd (as root once auth is on; ``as_user`` for another); its stdout.
        A failure raises ``RuntimeError`` with etcdctl's message (which never holds a password)."""
        who = as_user or self.root
        env = dict(os.environ, ETCDCTL_API="3", ETCDCTL_USER=who.name, ETCDCTL_PASSWORD=who.password)
        command = ["etcdctl", "--endpoints", self.server.endpoint, "--cacert", str(self.tls.ca)]
        if self.tls.client_cert and self.tls.client_key:
            command += ["--cert", str(self.tls.client_cert), "--key", str(self.tls.client_key)]
        done = subprocess.run([*command, *args], input=stdin, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    # ---- URLs ------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.server.port

    def url(self, user: EtcdUser | None = None, prefix: str | None = None, **options: str) -> str:
        """A store URL for ``user`` (default: the prefix's user) below ``prefix`` (default: the
        cluster's), over TLS, the password in ``password_file``; ``options`` added to the query."""
        who = user or self.user
        query = {"tls": "true", "ca": str(self.tls.ca)}
        if self.tls.client_cert and self.tls.client_key:
            query |= {"cert": str(self.tls.client_cert), "key": str(self.tls.client_key)}
        query |= {"username": who.name, "password_file": str(who.password_file), **options}
        text = "&".join(f"{k}={v}" for k, v in query.items())
        return f"etcd://127.0.0.1:{self.port}{prefix if prefix is not None else self.prefix}?{text}"
