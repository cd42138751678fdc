"""How a pass ended: its result, and the exceptions that stop one."""

from __future__ import annotations

from dataclasses import dataclass


class Abandoned(Exception):
    """The flag moved or leadership went while a pass ran: the pass stops, the driver decides."""


class FreezeBroken(Exception):
    """Inside the freeze, the source changed (or the change stream broke) while a pass ran."""


class MembersJoined(Exception):
    """A member registered in the source through a session no agent holds (``MemberGuard``)."""


class Unreachable(Exception):
    """A store did not answer while a pass ran (SYNCING: wait for it, then another full pass)."""


@dataclass
class PassResult:
    """How a phase's copy work ended: ``failure`` set means the migration must fail."""

    failure: str | None = None
    passes: int = 0
