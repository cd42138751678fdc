"""The pinned Pulsar release itself: Pulsar's own PIP-454 migration code, if it shipped any, would
act on metashift's flag."""

from __future__ import annotations

import zipfile

from metashift.pulsar_cluster import PulsarNotInstalled, find_release
from tests.harness import require_part


def test_release_ships_no_pip454_migration_code() -> None:
    """Pulsar's own PIP-454 code (``DualMetadataStore``, which 4.2 wraps around every ``zk:`` store,
    and ``MigrationCoordinator``) reads and writes ``/pulsar/migration-coordinator/migration`` and
    registers its own participants there: a release that ships it would act on metashift's flag.
    The pinned release must not (README, "A real Pulsar cluster on metashift")."""
    try:
        release = find_release()
    except PulsarNotInstalled as e:
        require_part(str(e))
    jars = list(release.lib.glob("pulsar-metadata-*.jar"))
    assert jars, release.lib
    with zipfile.ZipFile(jars[0]) as jar:
        names = jar.namelist()
    assert "org/apache/pulsar/metadata/impl/ZKMetadataStore.class" in names
    pip454 = [n for n in names if n.endswith(("/DualMetadataStore.class", "/MigrationCoordinator.class"))]
    assert pip454 == [], f"{jars[0].name} ships PIP-454's migration code: {pip454}"
