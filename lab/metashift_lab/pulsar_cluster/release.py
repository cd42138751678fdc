"""The stock Pulsar releases ``make setup`` fetched: where their jars are, which version each is,
and how their JVMs are started (the flags Pulsar's own ``bin/pulsar`` passes).

Two releases, each in its folder of the cache (``<version>/lib``), beside one ``admin-lib``
(``pulsar-admin``): 4.0.7 of the 4.0 LTS line (the default), and 4.2.4, the newest served here,
which ships PIP-454's own migration code (``DualMetadataStore``)."""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from metashift_lab import CACHE
from metashift_lab.jvm import LEAN_JVM_FLAGS

#: Environment variable naming the folder that holds ``<version>/lib/`` and ``admin-lib/`` (default:
#: the checkout's ``.cache/pulsar``, filled by ``make setup``).
HOME_ENV = "METASHIFT_PULSAR_HOME"
#: The releases ``make setup`` fetches: the 4.0 LTS line's (the default), and 4.2's.
LTS_VERSION = "4.0.7"
RELEASES = (LTS_VERSION, "4.2.4")

#: What ``bin/pulsar`` gives every JVM: ZooKeeper packets up to 10 MB (so a ZooKeeper front must
#: serve them), IPv4, Netty's reflection, and the ``--add-opens`` Java 17 needs for BookKeeper's
#: and Netty's direct-memory tricks; and, so that bookies and brokers accept ``metadata-store:``
#: URIs, Pulsar's BookKeeper metadata drivers.
PULSAR_JVM_FLAGS = (
    "-Djute.maxbuffer=10485760",
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED",
    "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "-Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
)  # fmt: skip


class PulsarNotInstalled(RuntimeError):
    """The Pulsar release's jars (or java) are not there: ``make setup`` fetches them."""

    pass


@dataclass(frozen=True)
class PulsarRelease:
    """One fetched release: ``lib/`` (broker, bookie, cluster setup) and ``admin-lib/`` (pulsar-admin)."""

    home: Path
    version: str
    admin_version: str
    lib: Path
    """The release's jars (broker, bookie, cluster setup)."""

    @property
    def ships_pip454(self) -> bool:
        """Its metadata layer carries PIP-454's own migration (``DualMetadataStore``, 4.2+)."""
        return any(_holds(jar, DUAL_STORE_CLASS) for jar in self.lib.glob("pulsar-metadata-*.jar"))

    @property
    def admin_lib(self) -> Path:
        return self.home / "admin-lib"

    def java(
        self, main_class: str, *, heap_mb: int, log_config: Path, direct_mb: int | None = None,
        properties: dict[str, str] | None = None, admin: bool = False,
    ) -> list[str]:  # fmt: skip
        """The command line of one of the release's JVMs."""
        java = shutil.which("java")
        if java is None:
            raise PulsarNotInstalled("java not found: install a JRE 17 (make setup)")
        flags = [f"-Xmx{heap_mb}m", *LEAN_JVM_FLAGS, *PULSAR_JVM_FLAGS, f"-Dlog4j.configurationFile={log_config}"]
        if direct_mb is not None:
            flags.append(f"-XX:MaxDirectMemorySize={direct_mb}m")
        flags += [f"-D{k}={v}" for k, v in (properties or {}).items()]
        classpath = f"{self.admin_lib if admin else self.lib}/*"
        return [java, *flags, "-cp", classpath, main_class]


def default_home() -> Path:
    """``.cache/pulsar`` of the checkout this package runs from."""
    return CACHE / "pulsar"


def _version(lib: Path, artifact: str) -> str | None:
    for jar in sorted(lib.glob(f"{artifact}-*.jar")):
        found = re.fullmatch(rf"{re.escape(artifact)}-(\d+\.\d+\.\d+)\.jar", jar.name)
        if found:
            return found.group(1)
    return None


def find_release(version: str | None = None, home: str | os.PathLike[str] | None = None) -> PulsarRelease:
    """The release ``version`` (``LTS_VERSION`` by default) in ``home`` (else
    ``$METASHIFT_PULSAR_HOME``, else the checkout's ``.cache/pulsar``): its ``<version>/lib``;
    ``PulsarNotInstalled`` when its jars are missing."""
    version = version or LTS_VERSION
    where = Path(home or os.environ.get(HOME_ENV) or default_home())
    lib = where / version / "lib"
    found = _version(lib, "pulsar-broker")
    admin_version = _version(where / "admin-lib", "pulsar-client-tools")
    if found is None or admin_version is None:
        raise PulsarNotInstalled(
            f"no Pulsar {version} in {where} ({version}/lib/pulsar-broker-*.jar, admin-lib/pulsar-client-tools-*.jar): "
            f"run `make setup`, or set {HOME_ENV}"
        )
    if found != version:
        raise PulsarNotInstalled(f"{lib} holds Pulsar {found}, not {version}: run `make setup` again")
    return PulsarRelease(where, found, admin_version, lib)


#: PIP-454's store wrapper, in ``pulsar-metadata`` of 4.2+.
DUAL_STORE_CLASS = "org/apache/pulsar/metadata/impl/DualMetadataStore.class"


def _holds(jar: Path, entry: str) -> bool:
    with zipfile.ZipFile(jar) as z:
        return entry in z.namelist()
