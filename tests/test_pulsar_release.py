"""The pinned Pulsar releases themselves (issue 33): each one ``make setup`` fetched is the version
it says, 4.0.7 ships no PIP-454 code and 4.2.4 does, and metashift's nodes are apart from the ones
PIP-454's code reads and acts on (so the two never both act on one cluster)."""

from __future__ import annotations

import zipfile

import pytest

from metashift.migration import paths
from metashift.stores import InvalidPath, reserved
from metashift_lab.pulsar_cluster import PulsarNotInstalled, PulsarRelease, find_release
from metashift_lab.pulsar_cluster.release import LTS_VERSION, RELEASES
from tests.harness import require_part

#: Where PIP-454 keeps its flag and participants, as ``MigrationState`` of 4.2 says (constants).
PIP454_CLASS = "org/apache/pulsar/common/migration/MigrationState.class"


def _release(version: str) -> PulsarRelease:
    try:
        return find_release(version)
    except PulsarNotInstalled as e:
        require_part(str(e))


@pytest.mark.parametrize("version", RELEASES)
def test_each_pinned_release_is_the_version_it_says(version: str) -> None:
    release = _release(version)
    assert release.version == version
    assert (release.lib / f"pulsar-broker-{version}.jar").is_file()
    assert release.lib.name == "lib" and release.lib.parent.name == version  # a folder of its own
    with zipfile.ZipFile(next(release.lib.glob("pulsar-metadata-*.jar"))) as jar:
        names = jar.namelist()
    assert "org/apache/pulsar/metadata/impl/ZKMetadataStore.class" in names
    # 4.2 wraps every zk: store in PIP-454's DualMetadataStore; the LTS line does not
    assert release.ships_pip454 is (version != LTS_VERSION), names[:0]
    assert find_release().version == LTS_VERSION  # the default


def test_metashifts_nodes_are_apart_from_pip454s() -> None:
    """PIP-454's paths, read from the 4.2 release's own ``MigrationState``, are where metashift's
    agents never keep anything of theirs; the ZooKeeper front serves PIP-454's flag itself."""
    release = _release("4.2.4")
    jars = list(release.lib.glob("pulsar-client-admin-api-*.jar"))
    assert jars, release.lib
    with zipfile.ZipFile(jars[0]) as jar:
        constants = jar.read(PIP454_CLASS)
    assert paths.LEGACY_FLAG.encode() in constants  # "/pulsar/migration-coordinator/migration"
    assert f"{paths.LEGACY_ROOT}/participants".encode() in constants
    for node in (paths.FLAG, paths.PARTICIPANTS, paths.LEADER, paths.ORIGIN, paths.PREFLIGHT):
        assert not node.startswith(paths.LEGACY_ROOT), node
        assert node.startswith(reserved.own_root() + "/"), node
    with pytest.raises(InvalidPath):
        reserved.check_root(paths.LEGACY_ROOT)
