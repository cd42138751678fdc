"""The subtree of a store that metashift keeps for itself: its migration protocol's nodes (the
flag, the participants, the leader, ...) and the floors of retired sequence counters. Never
copied as data, never a cluster's.

It is ``/metashift`` (below the store URL's chroot or prefix) unless ``METASHIFT_MIGRATION_ROOT``
names another; every agent and command of one cluster must use the same. It used to be
``/pulsar/migration-coordinator``, PIP-454's own subtree, which Pulsar 4.2+ reads and acts on
itself (``LEGACY_ROOT``): what an older metashift left there is still read.
"""

from __future__ import annotations

import os

from . import paths
from .errors import InvalidPath

#: The environment variable that names the root (the agent sets it from its config, so that the
#: copy's child processes use the same).
ENV = "METASHIFT_MIGRATION_ROOT"
DEFAULT_ROOT = "/metashift"
#: Where metashift kept its nodes before: PIP-454's paths (``/pulsar/migration-coordinator/...``).
LEGACY_ROOT = "/pulsar/migration-coordinator"


def check_root(root: str) -> str:
    """``root`` if it can hold metashift's nodes; ``InvalidPath`` (a ``ValueError`` too) otherwise."""
    paths.validate(root)
    if root == paths.SEPARATOR or paths.is_under(root, "/zookeeper") or paths.is_under(root, LEGACY_ROOT):
        raise InvalidPath(root, "the migration root must be a subtree of its own (not /, /zookeeper or "
                                f"{LEGACY_ROOT}, which Pulsar 4.2+ acts on)")
    return root


def own_root() -> str:
    """The root in use (``METASHIFT_MIGRATION_ROOT``, else ``/metashift``)."""
    return os.environ.get(ENV) or DEFAULT_ROOT


def set_own_root(root: str) -> None:
    """Use ``root`` in this process and the processes it starts."""
    os.environ[ENV] = check_root(root)
