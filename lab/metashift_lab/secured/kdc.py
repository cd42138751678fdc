"""A real MIT Kerberos KDC (Debian's ``krb5-kdc``) on loopback, for the tests and the lab.

``LocalKDC`` makes a realm (``kdb5_util create -s``) in a temporary directory, runs ``krb5kdc``
on a free loopback port (UDP and TCP) and adds principals with keytabs (``kadmin.local``). It
writes its own ``krb5.conf`` (``krb5_conf``) for the clients: a child process gets it through
``env()`` (``KRB5_CONFIG``), a JVM through ``java_options()`` (``-Djava.security.krb5.conf``).
Nothing of the machine's Kerberos configuration is read or changed.

The client configuration names hosts as written (``rdns = false``,
``dns_canonicalize_hostname = false``): a client that connects to ``localhost`` asks for
``service/localhost@REALM``, the principal ``add_service`` makes.

Usage::

    with LocalKDC() as kdc:
        server_keytab = kdc.add_service("zookeeper", "localhost")      # zookeeper/localhost@REALM
        client_keytab = kdc.add_principal("metashift")                 # metashift@REALM
        subprocess.run([...], env={**os.environ, **kdc.env()})
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from metashift_lab.ports import accepts
from metashift_lab.servers import ServerStartError, _LocalServer

#: The realm the lab's KDCs serve unless told otherwise.
REALM = "METASHIFT.TEST"
#: Where Debian puts the KDC's programs (``krb5kdc``, ``kdb5_util`` are in /usr/sbin).
_SBIN = ("/usr/sbin", "/sbin")


def _program(name: str) -> str:
    found = shutil.which(name) or next((f"{d}/{name}" for d in _SBIN if os.access(f"{d}/{name}", os.X_OK)), None)
    return found or name


class LocalKDC(_LocalServer):
    """An MIT KDC serving one realm on a free loopback port; its database, keytabs, ``kdc.conf``
    and ``krb5.conf`` live in its data directory."""

    name = "kdc"
    _install_hint = "install Debian's krb5-kdc, krb5-admin-server and krb5-user (make setup)"

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, port: int | None = None, *,
                 realm: str = REALM) -> None:
        super().__init__(data_dir, port)
        self.realm = realm

    # ---- what clients need ----------------------------------------------------------------------

    @property
    def krb5_conf(self) -> Path:
        """The clients' Kerberos configuration (``KRB5_CONFIG``), naming this KDC only."""
        return self.data_dir / "krb5.conf"

    def env(self) -> dict[str, str]:
        """The environment a child process needs to use this realm (its ``KRB5_CONFIG``)."""
        return {"KRB5_CONFIG": str(self.krb5_conf)}

    def java_options(self) -> list[str]:
        """The JVM options that make Java's Kerberos use this realm."""
        return [f"-Djava.security.krb5.conf={self.krb5_conf}"]

    def principal(self, name: str) -> str:
        """``name`` with this KDC's realm (``alice`` -> ``alice@METASHIFT.TEST``)."""
        return name if "@" in name else f"{name}@{self.realm}"

    # ---- principals and keytabs -----------------------------------------------------------------

    def add_principal(self, name: str, keytab: Path | None = None) -> Path:
        """Add principal ``name`` (a random key, pre-authentication required) and write its key
        to ``keytab`` (default ``<data dir>/<name>.keytab``, mode 0600); the keytab's path."""
        self._write_config()
        self.kadmin(f"addprinc -randkey +requires_preauth {self.principal(name)}")
        return self.export_keytab(name, keytab)

    def add_service(self, service: str, host: str, keytab: Path | None = None) -> Path:
        """Add the server principal ``service/host@REALM`` with a keytab (as ``add_principal``)."""
        return self.add_principal(f"{service}/{host}", keytab)

    def export_keytab(self, name: str, keytab: Path | None = None) -> Path:
        """Write ``name``'s keys to ``keytab``. ``kadmin``'s ktadd gives the principal new keys:
        a keytab exported before is stale from then on (a "wrong keytab")."""
        path = keytab or self.data_dir / f"{name.replace('/', '_')}.keytab"
        self.kadmin(f"ktadd -k {path} {self.principal(name)}")
        path.chmod(0o600)
        return path

    def delete_principal(self, name: str) -> None:
        """Remove principal ``name`` from the realm (its keytabs stay: an "unknown principal")."""
        self.kadmin(f"delprinc -force {self.principal(name)}")

    def kadmin(self, query: str) -> str:
        """Run one ``kadmin.local`` query on the realm's database; its output (fails loudly)."""
        result = subprocess.run([_program("kadmin.local"), "-r", self.realm, "-q", query], env=self._kdc_env(),
                                capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0 or "error" in result.stderr.lower():
            raise ServerStartError(f"kadmin.local {query!r} failed: {result.stderr.strip() or result.stdout.strip()}")
        return result.stdout

    # ---- the server -----------------------------------------------------------------------------

    @property
    def kdc_conf(self) -> Path:
        return self.data_dir / "kdc.conf"

    def _kdc_env(self) -> dict[str, str]:
        return {**os.environ, "KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        d = self.data_dir
        self.kdc_conf.write_text(
            f"[kdcdefaults]\n kdc_listen = 127.0.0.1:{self.port}\n kdc_tcp_listen = 127.0.0.1:{self.port}\n"
            f"[realms]\n {self.realm} = {{\n  database_name = {d / 'principal'}\n"
            f"  key_stash_file = {d / 'stash'}\n  acl_file = {d / 'kadm5.acl'}\n"
            "  max_life = 10h\n  max_renewable_life = 1d\n }\n"
            f"[logging]\n kdc = FILE:{d / 'kdc.log'}\n admin_server = FILE:{d / 'kadmin.log'}\n"
        )
        # the clients': this KDC over TCP (no UDP fragments to reason about), names as written
        self.krb5_conf.write_text(
            f"[libdefaults]\n default_realm = {self.realm}\n dns_lookup_realm = false\n dns_lookup_kdc = false\n"
            " rdns = false\n dns_canonicalize_hostname = false\n udp_preference_limit = 1\n"
            f"[realms]\n {self.realm} = {{\n  kdc = 127.0.0.1:{self.port}\n }}\n"
            f"[domain_realm]\n localhost = {self.realm}\n .localhost = {self.realm}\n"
        )
        (d / "kadm5.acl").touch()
        if not (d / "principal").exists():
            # the master key: random, on kdb5_util's standard input (never a command line), stashed
            master = secrets.token_urlsafe(24)
            result = subprocess.run([_program("kdb5_util"), "create", "-s", "-r", self.realm],
                                    input=f"{master}\n{master}\n", env=self._kdc_env(), capture_output=True,
                                    text=True, timeout=60, check=False)
            if result.returncode != 0:
                raise ServerStartError(f"kdb5_util create failed: {result.stderr.strip()}")

    def _choose_ports(self) -> None:
        super()._choose_ports()
        self._write_config()

    def _command(self) -> list[str]:
        self._write_config()
        # env(1) execs krb5kdc in place (the pid stays ours): krb5kdc finds its kdc.conf only there
        return ["env", f"KRB5_CONFIG={self.krb5_conf}", f"KRB5_KDC_PROFILE={self.kdc_conf}",
                _program("krb5kdc"), "-n", "-r", self.realm]

    def _ready(self) -> bool:
        return accepts(self.port)
