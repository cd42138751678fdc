"""Where the migration keeps its nodes in the source store (PIP-454's paths, so Pulsar's own
tooling can read them)."""

from __future__ import annotations

#: The subtree the copy never copies and the freeze watch ignores.
ROOT = "/pulsar/migration-coordinator"
#: The flag: JSON with the phase, the target and metashift's bookkeeping. No node: NOT_STARTED.
FLAG = f"{ROOT}/migration"
#: Parent of one sequential ephemeral per agent (``id-NNNNNNNNNN``).
PARTICIPANTS = f"{ROOT}/participants"
#: The prefix of a participant's node; the store appends the sequential suffix.
PARTICIPANT_PREFIX = f"{PARTICIPANTS}/id-"
#: The elected coordinator's ephemeral node.
LEADER = f"{ROOT}/leader"
#: The copy's progress, written by the coordinator while it copies (not part of the flag, so
#: that progress updates never race a phase move).
PROGRESS = f"{ROOT}/progress"
#: Written by the coordinator inside the freeze; its notification coming back proves that every
#: change written before it has reached the coordinator's change tracker.
BARRIER = f"{ROOT}/barrier"
#: Written by the coordinator as each full pass begins (after it started following the changes,
#: before the copy reads anything): every standby coordinator follows the changes from its
#: notification on, so that one taking over inside the freeze knows what changed since the pass.
PASS = f"{ROOT}/pass"
#: Written by the coordinator before it takes a round of changes to carry in SYNCING (and waited
#: for: every change before it is in the round), then ``CARRIED`` once they are carried: a standby
#: forgets what changed before ``CARRYING`` when ``CARRIED`` comes, so that its set stays small.
CARRYING = f"{ROOT}/carrying"
CARRIED = f"{ROOT}/carried"
#: ``migrate check``'s requests to every agent (``check-NNNNNNNNNN``, ephemerals of the checking
#: command's session, JSON ``{"targetUrl"}``): each agent opens that target with its own
#: credentials and answers in its participant record (``dryOpen``).
PREFLIGHT = f"{ROOT}/preflight"
PREFLIGHT_PREFIX = f"{PREFLIGHT}/check-"
#: In a store a migration completed into: where the cluster came from, and the epoch. Written by
#: the coordinator into the target just before COMPLETED; the next migration's epoch follows it.
ORIGIN = f"{ROOT}/origin"


def is_protocol_path(path: str) -> bool:
    """True for the migration's own nodes, which change while everything else is frozen."""
    return path == ROOT or path.startswith(ROOT + "/")
