"""Where the migration keeps its nodes in a store: below metashift's own root (``/metashift``
unless ``METASHIFT_MIGRATION_ROOT`` or the agent's ``migration.root`` names another:
``metashift.stores.reserved``), apart from PIP-454's ``/pulsar/migration-coordinator``, which
Pulsar 4.2+ brokers and bookies read and act on themselves.

The names below are module attributes set by ``use_root`` (read them as ``paths.FLAG``, never
copy them at import). ``LEGACY_FLAG`` and ``LEGACY_ORIGIN`` are where an older metashift kept its
flag and origin record: a store it migrated keeps them there, and they are still read.
"""

from __future__ import annotations

from metashift.stores import reserved

#: The subtree the copy never copies and the freeze watch ignores.
ROOT = ""
#: The flag: JSON with the phase, the target and metashift's bookkeeping. No node: NOT_STARTED.
FLAG = ""
#: Parent of one sequential ephemeral per agent (``id-NNNNNNNNNN``).
PARTICIPANTS = ""
#: The prefix of a participant's node; the store appends the sequential suffix.
PARTICIPANT_PREFIX = ""
#: The elected coordinator's ephemeral node.
LEADER = ""
#: The copy's progress, written by the coordinator while it copies (not part of the flag, so
#: that progress updates never race a phase move).
PROGRESS = ""
#: Written by the coordinator inside the freeze; its notification coming back proves that every
#: change written before it has reached the coordinator's change tracker.
BARRIER = ""
#: Written by the coordinator as each full pass begins (after it started following the changes,
#: before the copy reads anything): every standby coordinator follows the changes from its
#: notification on, so that one taking over inside the freeze knows what changed since the pass.
PASS = ""
#: Written by the coordinator before it takes a round of changes to carry in SYNCING (and waited
#: for: every change before it is in the round), then ``CARRIED`` once they are carried: a standby
#: forgets what changed before ``CARRYING`` when ``CARRIED`` comes, so that its set stays small.
CARRYING = ""
CARRIED = ""
#: ``migrate check``'s requests to every agent (``check-NNNNNNNNNN``, ephemerals of the checking
#: command's session, JSON ``{"targetUrl"}``): each agent opens that target with its own
#: credentials and answers in its participant record (``dryOpen``).
PREFLIGHT = ""
PREFLIGHT_PREFIX = ""
#: In a store a migration completed into: where the cluster came from, and the epoch. Written by
#: the coordinator into the target just before COMPLETED; the next migration's epoch follows it.
ORIGIN = ""

#: PIP-454's subtree, where an older metashift kept its nodes.
LEGACY_ROOT = reserved.LEGACY_ROOT
LEGACY_FLAG = f"{LEGACY_ROOT}/migration"
LEGACY_ORIGIN = f"{LEGACY_ROOT}/origin"


def use_root(root: str) -> None:
    """Keep the migration's nodes below ``root`` in this process (and the processes it starts);
    ``InvalidPath`` for a root that cannot be one (``reserved.check_root``)."""
    reserved.set_own_root(root)
    _name_nodes()


def _name_nodes() -> None:
    global ROOT, FLAG, PARTICIPANTS, PARTICIPANT_PREFIX, LEADER, PROGRESS, BARRIER, PASS, CARRYING, CARRIED
    global PREFLIGHT, PREFLIGHT_PREFIX, ORIGIN
    ROOT = reserved.own_root()
    FLAG = f"{ROOT}/migration"
    PARTICIPANTS = f"{ROOT}/participants"
    PARTICIPANT_PREFIX = f"{PARTICIPANTS}/id-"
    LEADER = f"{ROOT}/leader"
    PROGRESS = f"{ROOT}/progress"
    BARRIER = f"{ROOT}/barrier"
    PASS = f"{ROOT}/pass"
    CARRYING = f"{ROOT}/carrying"
    CARRIED = f"{ROOT}/carried"
    PREFLIGHT = f"{ROOT}/preflight"
    PREFLIGHT_PREFIX = f"{PREFLIGHT}/check-"
    ORIGIN = f"{ROOT}/origin"


_name_nodes()


def is_protocol_path(path: str) -> bool:
    """True for the migration's own nodes, which change while everything else is frozen."""
    return path == ROOT or path.startswith(ROOT + "/")
