"""The pre-flight check behind ``metashift migrate check`` (and ``migrate start``, which runs it
before it writes anything): is every member of the cluster behind an agent, can every agent open
the target, is the target reachable and empty?

What it looks at, each a line of its report:
- ``source``: reachable, and no migration in progress or completed from it.
- ``target``: reachable from here, not the source, and empty.
- ``agents``: who is registered (a participant record each), alive or not.
- ``members``: every live ephemeral of the source (broker and bookie registrations, and any
  other) held by an agent's store session. A member whose session no agent holds reaches the
  store directly: a migration would split it off from the cluster (``members``).
- ``target access``: every live agent opened the target with its own credentials (a dry open
  asked through the source: ``agent.dry_open``).
- ``versions``: every agent runs the same metashift version.

``problems`` are what ``start`` refuses (``--force --reason`` overrides them); ``refusals``
are what no flag overrides (a migration in progress, no agent, a target that is the source or
not empty); ``warnings`` are said and let pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from metashift.migration import paths
from metashift.migration.members import Census, census, session_name
from metashift.migration.origin import read_state
from metashift.migration.participants import ParticipantRecord, list_participants
from metashift.stores import MetadataStore, MetadataStoreError, NotFound, StoreURL, open_store

from .cleanup import first_path

#: How long ``check`` waits for every live agent's dry open of the target, by default.
DRY_OPEN_WAIT = 20.0
#: How often the participant records are read while waiting.
_POLL = 0.2


#: A line's outcome: passed, failed (``start`` refuses), or said and let pass.
OK, FAILED, WARNING = "ok", "failed", "warning"


@dataclass
class Line:
    """One line of the report: a check, how it came out, and what it found."""

    name: str
    status: str
    detail: str


@dataclass
class Preflight:
    """What ``migrate check`` found; ``to_dict`` is its JSON."""

    source: str
    target: str
    lines: list[Line] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    agents: list[dict[str, Any]] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)
    bypassing: list[dict[str, Any]] = field(default_factory=list)
    """Sessions no agent holds: ``session``, ``owner`` (the number), ``paths``, ``members``."""

    @property
    def ready(self) -> bool:
        return not self.refusals and not self.problems

    @property
    def bypassing_owners(self) -> list[int]:
        return [int(b["owner"]) for b in self.bypassing]

    def add(self, name: str, ok: bool | str, detail: str) -> None:
        """A line: ``ok`` True, False (failed) or ``WARNING``."""
        status = ok if isinstance(ok, str) else OK if ok else FAILED
        self.lines.append(Line(name, status, detail))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ready": self.ready, "source": self.source, "target": self.target,
            "checks": [{"name": x.name, "ok": x.status != FAILED, "status": x.status, "detail": x.detail}
                       for x in self.lines],
            "refusals": self.refusals, "problems": self.problems, "warnings": self.warnings,
            "agents": self.agents, "members": self.members,
            "bypassing": [{k: v for k, v in b.items() if k != "owner"} for b in self.bypassing],
        }

    def text(self) -> str:
        out = [f"migrate check: {self.source} -> {self.target}"]
        for x in self.lines:
            out.append(f"  {x.status.upper() if x.status != OK else OK:<8} {x.name:<14} {x.detail}")
        if self.members:
            out.append("members")
            for m in self.members:
                through = f"agent {m['agent']}" if m["agent"] else "NO AGENT"
                out.append(f"  {m['kind']:<17} {m['name']:<28} {through:<20} (session {m['session']})")
        for title, items in (("refused (no flag overrides these)", self.refusals),
                             ("problems (migrate start refuses; --force --reason TEXT overrides)", self.problems),
                             ("warnings", self.warnings)):
            if items:
                out.append(title)
                out.extend(f"  {item}" for item in items)
        out.append(f"ready: {'yes' if self.ready else 'no'}")
        return "\n".join(out)


async def check(
    source: MetadataStore, target: StoreURL, *, wait: float = DRY_OPEN_WAIT, clean_target: bool = False,
    startable: bool = True,
) -> Preflight:
    """Every check of the module, reported; nothing of the cluster's is written (the dry-open
    request is an ephemeral of this command's session, removed at the end). ``clean_target``:
    a target that is not empty is a warning (``start --clean-target`` would empty it), not a
    refusal. ``startable=False``: the source's flag was already judged by the caller."""
    report = Preflight(source.url.public(), target.public())
    if startable:
        await _source_state(source, report)
    else:
        report.add("source", True, "reachable")
    await _target(source, target, report, clean_target)
    records = await list_participants(source)
    alive = _agents(records, report)
    found = await census(source, records)
    _members(found, records, report)
    # an agent that does not say its version predates the dry opens: it cannot be asked
    askable = [r for r in alive if r.agent_version]
    for r in alive:
        if not r.agent_version:
            report.warnings.append(f"agent {r.node_id} is older than this check: it cannot be asked to open the "
                                   "target (upgrade it)")
    answers = await ask_dry_opens(source, target, [r.node_id for r in askable], wait) if askable else {}
    if alive:
        _target_access(askable, answers, report, wait)
    _versions(records, report)
    return report


async def _source_state(source: MetadataStore, report: Preflight) -> None:
    state = await read_state(source)
    flag = state.current_flag
    if state.left_for is not None:
        report.add("source", False, f"the cluster left this store for {state.left_for}")
        report.refusals.append(f"the migration to {state.left_for} is already completed: the cluster lives there "
                               "now; check and start from there")
    elif flag is not None and flag.phase.in_progress:
        report.add("source", False, f"a migration is in progress (phase {flag.phase.value}, epoch {flag.epoch})")
        report.refusals.append(f"a migration is already in progress (phase {flag.phase.value})")
    else:
        report.add("source", True, "reachable; no migration in progress")


async def _target(source: MetadataStore, target: StoreURL, report: Preflight, clean_target: bool) -> None:
    if target.overlaps(source.url):
        same = target.root == source.url.root
        report.add("target", False, "the target is the source" if same else "the target shares nodes with the source")
        report.refusals.append(f"the target is the source ({target})" if same else
                               f"the target {target} and the source {source.url} share nodes (one lies inside "
                               "the other): a migration needs another store")
        return
    try:
        async with await open_store(target, watch=False, create_root=False) as store:
            found = await first_path(store)
    except NotFound:
        found = None  # a chroot that does not exist yet: the start creates it, empty
    except MetadataStoreError as e:
        report.add("target", False, f"cannot be reached from here: {e}")
        report.refusals.append(f"the target {target} cannot be reached: {e}")
        return
    if found is None:
        report.add("target", True, "reachable and empty")
    elif clean_target:
        report.add("target", True, f"reachable, not empty ({found}): --clean-target empties it first")
    else:
        report.add("target", False, f"not empty: it holds {found}")
        report.refusals.append(f"the target {target} is not empty: it holds {found} (--clean-target removes what "
                               "is there)")


def _agents(records: list[ParticipantRecord], report: Preflight) -> list[ParticipantRecord]:
    """List the agents; the live ones (a heartbeat within their timeout, by their own clock's
    stamp: this command has watched them for no time) are asked for a dry open."""
    now = int(time.time() * 1000)
    alive: list[ParticipantRecord] = []
    for r in records:
        age = r.heartbeat_age(now)
        live = age is None or r.timeout is None or age <= r.timeout
        if live:
            alive.append(r)
        else:
            report.warnings.append(f"agent {r.node_id} ({r.role}) gave no heartbeat for {age:.0f}s: dead? a "
                                   "migration does not wait for it")
        report.agents.append({
            "node_id": r.node_id, "role": r.role, "address": r.address, "version": r.agent_version or None,
            "session": session_name(r.owner) if r.owner else None, "alive": live, "target_open": None,
        })
    if not records:
        report.add("agents", False, "no agent is registered")
        report.refusals.append(f"no agent is registered under {paths.PARTICIPANTS}: nobody would act on a migration")
    else:
        names = ", ".join(r.node_id for r in records)
        dead = len(records) - len(alive)
        report.add("agents", True, f"{len(records)} registered ({names})" + (f", {dead} dead" if dead else ""))
    return alive


def _members(found: Census, records: list[ParticipantRecord], report: Preflight) -> None:
    report.members = found.members()
    for holder in found.bypassing:
        report.problems.append(holder.problem())
        report.bypassing.append({
            "session": holder.session, "owner": holder.owner, "paths": sorted(holder.paths),
            "members": [{"kind": k, "name": n, "path": p} for k, n, p in holder.members],
        })
    kinds: dict[str, int] = {}
    for m in report.members:
        kinds[str(m["kind"])] = kinds.get(str(m["kind"]), 0) + 1
    counted = ", ".join(f"{n} {k}{'s' if n > 1 else ''}" for k, n in kinds.items()) or "no broker or bookie"
    others = found.ephemerals(by_agents=True) + found.ephemerals(by_agents=False) - len(report.members)
    if found.bypassing:
        detail = (f"{counted}; {len(found.bypassing)} session(s) no agent holds "
                  f"({found.ephemerals(by_agents=False)} ephemeral(s))")
    else:
        detail = f"{counted}, {others} other ephemeral(s): every one held by an agent's session"
    report.add("members", not found.bypassing, detail)
    # an agent in front of nothing: its broker or bookie is down, or was never restarted onto it
    held = {(m["agent"], str(m["kind"]).replace("read-only ", "")) for m in report.members if m["agent"]}
    for r in records:
        if r.role in ("broker", "bookie") and (r.node_id, r.role) not in held:
            report.warnings.append(f"agent {r.node_id} ({r.role}) holds no {r.role} registration: its {r.role} is "
                                   "not running, or not restarted onto its agent yet")


async def ask_dry_opens(source: MetadataStore, target: StoreURL, agents: list[str], wait: float) -> dict[str, Any]:
    """Ask every agent to open ``target`` with its own credentials (a request under
    ``preflight/``) and wait up to ``wait`` seconds for the answers of ``agents`` (node ids):
    node id -> ``DryOpen``; the ones that did not answer are missing."""
    body = json.dumps({"targetUrl": target.public(), "at": int(time.time() * 1000)}).encode()
    stat = await source.put(paths.PREFLIGHT_PREFIX, body, ephemeral=True, sequential=True)
    request = stat.path.rpartition("/")[2]
    answers: dict[str, Any] = {}
    deadline = time.monotonic() + wait
    try:
        while True:
            for r in await list_participants(source):
                if r.dry_open is not None and r.dry_open.request == request:
                    answers[r.node_id] = r.dry_open
            if set(agents) <= set(answers) or time.monotonic() > deadline:
                return answers
            await asyncio.sleep(_POLL)
    finally:
        with contextlib.suppress(MetadataStoreError):
            await source.delete(stat.path)


def _target_access(alive: list[ParticipantRecord], answers: dict[str, Any], report: Preflight, wait: float) -> None:
    failed = 0
    for agent in report.agents:
        answer = answers.get(agent["node_id"])
        if answer is not None:
            agent["target_open"] = {"ok": answer.ok, "error": answer.error}
    for r in alive:
        answer = answers.get(r.node_id)
        if answer is None:
            failed += 1
            report.problems.append(
                f"agent {r.node_id} did not answer the dry open of the target within {wait:g}s: it is not running, "
                "or older than this check (upgrade it)"
            )
        elif not answer.ok:
            failed += 1
            report.problems.append(
                f"agent {r.node_id} cannot open the target with its own credentials: {answer.error} (set its "
                "[target] credentials, or let its node reach the target)"
            )
    if failed:
        report.add("target access", False, f"{failed} of {len(alive)} live agent(s) could not open the target")
    elif not alive:
        report.add("target access", WARNING, "no live agent could be asked (agents older than this check)")
    else:
        report.add("target access", True, f"every live agent ({len(alive)}) opened the target with its own "
                                          "credentials")


def _versions(records: list[ParticipantRecord], report: Preflight) -> None:
    by_version: dict[str, list[str]] = {}
    for r in records:
        by_version.setdefault(r.agent_version or "older than 0.1.0", []).append(r.node_id)
    if len(by_version) <= 1:
        only = next(iter(by_version), None)
        report.add("versions", True, f"every agent runs metashift {only}" if only else "no agent")
        return
    shown = "; ".join(f"{v}: {', '.join(names)}" for v, names in sorted(by_version.items()))
    report.add("versions", WARNING, f"agents of different versions ({shown})")
    report.warnings.append(f"agents run different metashift versions ({shown}): upgrade them to one version "
                           "before migrating")
