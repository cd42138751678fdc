"""The pre-flight check behind ``metashift migrate check`` (and ``migrate start``, which runs it
before it writes anything): is every member of the cluster behind an agent, can every agent open
the target, is the target reachable and empty?

What it looks at, each a line of its report:
- ``source``: reachable, and no migration in progress or completed from it.
- ``target``: reachable from here, not the source, and empty.
- ``agents``: who is registered (a participant record each), alive or not.
- ``members``: every live ephemeral of the source (broker and bookie registrations, and any
  other) held by an agent's store session. A member whose session no agent holds reaches the
  store directly: a migration would split it off from the cluster (``members``). Or its process
  is gone and its session outlives it (a member restarted onto its agent, whose old session was
  not closed: Pulsar on etcd does not revoke its lease): each such session is said with the time
  it still has, as far as the store tells (``BulkStore.session_lives``), and ``check_waiting``
  (``migrate check --wait``) waits for those to lapse.
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
import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metashift.migration import paths
from metashift.migration.members import Census, census, session_name
from metashift.migration.origin import read_state
from metashift.migration.participants import ParticipantRecord, list_participants
from metashift.stores import (
    BulkStore,
    GetOp,
    MetadataStore,
    MetadataStoreError,
    NotFound,
    SessionLife,
    StoreURL,
    open_store,
)

from .cleanup import first_path

#: How long ``check`` waits for every live agent's dry open of the target, by default.
DRY_OPEN_WAIT = 20.0
#: How often the participant records are read while waiting.
_POLL = 0.2


#: ``check_waiting``: how often the sessions waited for are looked at, and how often it says so.
LAPSE_POLL = 1.0
PROGRESS_SECONDS = 5.0
#: ``check_waiting``: how much later than the store said a session may lapse before it counts as
#: renewed (ZooKeeper expires sessions on its tick, 2 s by default; etcd and Oxia check about
#: twice a second), and how much an etcd lease's time to live may read above what it had, less
#: the time since (its whole seconds, rounded up).
LAPSE_SLACK = 3.0
TTL_SLACK = 1.5
#: ``--wait``: the most seconds it accepts.
MAX_WAIT = 3600.0

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
    """Sessions no agent holds: ``session``, ``owner`` (the number), ``paths``, ``members``, what
    the store tells of its time left (``SessionLife``'s fields: ``name``, ``alive``,
    ``expires_in``, ``timeout``, ``expires_within``, ``renewed``, ``unknown``), ``said`` (the same
    in words) and ``problem`` (its line among ``problems``)."""
    waited: dict[str, Any] | None = None
    """``check_waiting``: what ``--wait`` waited for and how it ended; ``None`` without it."""

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
            "bypassing": [{k: v for k, v in b.items() if k not in ("owner", "problem")} for b in self.bypassing],
            "waited": self.waited,
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
        if self.waited is not None:
            w = self.waited
            out.append(f"waited {w['waited_s']:.0f} s of --wait {w['seconds']:g}: {w['outcome']} ({w['detail']})")
        out.append(f"ready: {'yes' if self.ready else 'no'}")
        return "\n".join(out)


def unreachable_source(source: StoreURL, target: StoreURL, error: MetadataStoreError) -> Preflight:
    """The check of a source this command could not open (``error``: unreachable or refused, in
    one line; a chroot that does not exist stays bad input, exit 2)."""
    report = Preflight(source.public(), target.public())
    report.add("source", False, f"cannot be opened from here: {error}")
    report.refusals.append(f"the source {source.public()} cannot be opened: {error}")
    return report


async def check(
    source: MetadataStore, target: StoreURL, *, wait: float = DRY_OPEN_WAIT, clean_target: bool = False,
    startable: bool = True, watched: Watch | None = None,
) -> Preflight:
    """Every check of the module, reported; nothing of the cluster's is written (the dry-open
    request is an ephemeral of this command's session, removed at the end). ``clean_target``:
    a target that is not empty is a warning (``start --clean-target`` would empty it), not a
    refusal. ``startable=False``: the source's flag was already judged by the caller.
    ``watched``: what ``check_waiting`` saw of the sessions no agent holds (renewed ones)."""
    report = Preflight(source.url.public(), target.public())
    if startable:
        await _source_state(source, report)
    else:
        report.add("source", True, "reachable")
    await _target(source, target, report, clean_target)
    records = await list_participants(source)
    alive = _agents(records, report)
    found = await census(source, records)
    lives = await session_lives(source, {h.owner: sorted(h.paths) for h in found.bypassing})
    _members(found, records, report, lives, watched or Watch())
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


async def session_lives(source: MetadataStore, wanted: dict[int, list[str]]) -> dict[int, SessionLife]:
    """What the store tells of each session of ``wanted`` (owner -> the paths of its ephemerals);
    a store that cannot be asked, or fails to answer, tells nothing (said so, not a failure of the
    check)."""
    if not wanted:
        return {}
    if isinstance(source, BulkStore):
        try:
            return await source.session_lives(wanted)
        except MetadataStoreError as e:
            why = f"the store did not tell ({e})"
    else:
        why = "the store cannot be asked"
    return {owner: SessionLife(owner, f"session 0x{owner:x}", unknown=why) for owner in wanted}


def _members(
    found: Census, records: list[ParticipantRecord], report: Preflight, lives: dict[int, SessionLife], watched: Watch,
) -> None:
    report.members = found.members()
    for holder in found.bypassing:
        life = lives.get(holder.owner) or SessionLife(holder.owner, holder.session, unknown="the store did not tell")
        renewal = watched.renewed.get(holder.owner)
        if renewal is not None:
            life = dataclasses.replace(life, renewed=True)
        said = life_text(life, renewal)
        problem = f"{holder.problem()}; {said}"
        report.problems.append(problem)
        report.bypassing.append({
            "session": holder.session, "owner": holder.owner, "paths": sorted(holder.paths),
            "members": [{"kind": k, "name": n, "path": p} for k, n, p in holder.members],
            "name": life.name, "alive": life.alive, "expires_in": life.expires_in, "timeout": life.timeout,
            "expires_within": life.expires_within, "renewed": life.renewed, "unknown": life.unknown or None,
            "said": said, "problem": problem,
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
        refused = [(r.node_id, a.error) for r in alive if (a := answers.get(r.node_id)) is not None and not a.ok]
        why = f" ({refused[0][0]}: {refused[0][1]})" if refused else ""
        report.add("target access", False, f"{failed} of {len(alive)} live agent(s) could not open the target{why}")
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


# ---- the time a session no agent holds still has, and ``--wait`` ---------------------------------


def _seconds(value: float) -> str:
    return f"{value:.0f} s"


def wait_hint(life: SessionLife) -> int | None:
    """A ``--wait`` that outlasts ``life`` as the store tells it; ``None`` when it tells no bound."""
    span = life.expires_in if life.expires_in is not None else life.expires_within
    return None if span is None else max(10, 5 * math.ceil((span + LAPSE_SLACK) / 5))


def life_text(life: SessionLife, renewal: str | None = None) -> str:
    """The store's word on a session no agent holds, in a line: how long it still has, whether a
    client renews it, what the store does not tell, and what to do. ``renewal``: how
    ``check_waiting`` saw it renewed."""
    name = life.name
    if renewal is not None:
        return f"{name} is renewed ({renewal}): a live client keeps it, it will not lapse"
    if life.alive is False:
        return f"{name} lapsed just now (its ephemerals go with it): check again"
    if life.renewed:
        timeout = f", timeout {_seconds(life.timeout)}" if life.timeout is not None else ""
        return f"{name} is connected (a live client renews it{timeout}): it will not lapse until that client stops"
    aside = [life.unknown] if life.unknown else []
    if life.expires_in is not None:
        if life.renewed is False:
            said = f"{name} has no connection and expires in {_seconds(life.expires_in)} unless a client resumes it"
        else:
            said = f"{name} expires in {_seconds(life.expires_in)} unless renewed"
        if life.timeout is not None:
            aside.insert(0, f"granted {_seconds(life.timeout)}")
    elif life.expires_within is not None:
        said = f"{name} lapses at most {_seconds(life.expires_within)} after its client's last contact"
        aside.insert(0, life.within or "a bound")
    else:
        said = f"{name}: how long it still has is not told"
    if aside:
        said += f" ({'; '.join(aside)})"
    hint = wait_hint(life)
    wait = f"metashift migrate check --wait {hint}" if hint is not None else "metashift migrate check --wait SECONDS"
    return (f"{said}; if its process is gone (a member restarted onto its agent without closing it), it lapses by "
            f"itself: check again then, or {wait}")


def _short(life: SessionLife) -> str:
    """A session's time left in a few words, for the progress lines of ``--wait``."""
    if life.alive is False:
        return f"{life.name} (lapsed)"
    if life.expires_in is not None:
        return f"{life.name} (expires in {_seconds(life.expires_in)} unless renewed)"
    if life.expires_within is not None:
        return f"{life.name} (lapses within {_seconds(life.expires_within)} of its client's last contact)"
    return f"{life.name} (time left not told)"


@dataclass
class Watch:
    """What ``check_waiting`` saw of the sessions no agent holds over its looks: a session seen
    renewed (its time to live went up, or it outlived what it had when first seen) is named so
    instead of being waited out."""

    first: dict[int, tuple[float, float | None]] = field(default_factory=dict)
    """owner -> (when it was first seen, monotonic; the seconds it had then, as far as told)."""
    last: dict[int, tuple[float, float]] = field(default_factory=dict)
    """owner -> (when, the ``expires_in`` read then)."""
    renewed: dict[int, str] = field(default_factory=dict)
    """owner -> how it was seen renewed."""

    def see(self, life: SessionLife, now: float) -> None:
        owner = life.owner
        if life.alive is False:
            return
        if life.renewed:
            self.renewed[owner] = "a client's connection carries it"
            return
        if owner not in self.first:
            span = life.expires_in if life.expires_in is not None else life.expires_within
            self.first[owner] = (now, span)
        else:
            since, span = self.first[owner]
            if span is not None and now - since > span + LAPSE_SLACK:
                self.renewed[owner] = (f"still there {_seconds(now - since)} after it was first seen, past the "
                                       f"{_seconds(span)} the store gave it")
        if life.expires_in is not None:
            before = self.last.get(owner)
            # a store that says whether a client is connected (ZooKeeper) is believed on that; its
            # expiry, read to within a tick, is not compared
            if (before is not None and life.renewed is None
                    and life.expires_in > before[1] - (now - before[0]) + TTL_SLACK):
                self.renewed[owner] = (f"its time to live went up from {_seconds(before[1])} to "
                                       f"{_seconds(life.expires_in)} while watched")
            self.last[owner] = (now, life.expires_in)


async def check_waiting(
    source: MetadataStore, target: StoreURL, seconds: float, *, wait: float = DRY_OPEN_WAIT,
    say: Callable[[str], None] = lambda line: None,
) -> Preflight:
    """``check``, and when its only problems are sessions no agent holds that nobody is known to
    renew, wait up to ``seconds`` for them to lapse (saying what it waits for through ``say``),
    then check again: the answer is the last check's, with ``waited`` saying how the wait went. A
    session seen renewed meanwhile ends the wait, and the answer names it so."""
    if not 0 <= seconds <= MAX_WAIT:
        raise ValueError(f"--wait must be 0 to {MAX_WAIT:g} seconds")
    started = time.monotonic()
    deadline = started + seconds
    watched = Watch()
    names: dict[int, str] = {}
    lapsed: list[str] = []
    report = await check(source, target, wait=wait, watched=watched)
    outcome, detail = "timed out", "the wait ran out"
    for round_ in range(_MAX_CHECKS):
        stop = _why_not_wait(report, deadline - time.monotonic(), first=round_ == 0)
        if stop is not None:
            outcome, detail = stop
            break
        for b in report.bypassing:
            names[int(b["owner"])] = str(b["name"])
        outcome, detail = await _wait_lapse(source, report, watched, deadline, say, lapsed)
        report = await check(source, target, wait=wait, watched=watched)
        if outcome != "lapsed":
            break
    else:
        outcome, detail = "timed out", "new sessions no agent holds kept coming"
    report.waited = {
        "seconds": seconds, "outcome": outcome, "detail": detail, "waited_s": round(time.monotonic() - started, 1),
        "sessions": sorted(names.values()), "lapsed": lapsed,
        "renewed": sorted(str(b["name"]) for b in report.bypassing if b["renewed"]),
    }
    return report


#: ``check_waiting``: the most checks it runs (a session that lapses may be followed by another).
_MAX_CHECKS = 10


def _why_not_wait(report: Preflight, left: float, *, first: bool) -> tuple[str, str] | None:
    """Why ``report`` is not waited on (outcome, in words), ``None`` when it is."""
    if report.ready:
        return ("not needed", "ready at once") if first else ("lapsed", "every session waited for lapsed")
    if report.refusals:
        return "not waited", "the check refuses, which no wait changes"
    sessions = {b["problem"] for b in report.bypassing}
    others = [p for p in report.problems if p not in sessions]
    if others:
        return "not waited", f"a problem that is not a session to wait for: {others[0]}"
    renewed = [b["name"] for b in report.bypassing if b["renewed"]]
    if renewed:
        return "renewed", f"renewed, it will not lapse: {', '.join(renewed)}"
    if left <= 0:
        return ("not waited", "no time to wait") if first else ("timed out", "the wait ran out")
    beyond = [b for b in report.bypassing if b["expires_in"] is not None and b["expires_in"] > left + LAPSE_SLACK]
    if beyond:
        b = beyond[0]
        return "not waited", (f"{b['name']} has {_seconds(b['expires_in'])} left, more than the {_seconds(left)} the "
                              "wait has")
    return None


async def _wait_lapse(
    source: MetadataStore, report: Preflight, watched: Watch, deadline: float, say: Callable[[str], None],
    lapsed: list[str],
) -> tuple[str, str]:
    """Look at the sessions of ``report.bypassing`` until every one lapsed (its ephemerals gone),
    one is seen renewed, or ``deadline``: the outcome, in words."""
    pending = {int(b["owner"]): list(b["paths"]) for b in report.bypassing}
    names = {int(b["owner"]): str(b["name"]) for b in report.bypassing}
    said_at = -math.inf
    for _ in range(int(max(deadline - time.monotonic(), 0) / LAPSE_POLL) + 2):
        still = await _still_there(source, pending)
        for owner in sorted(set(pending) - still):
            lapsed.append(names[owner])
            say(f"{names[owner]} lapsed: its ephemerals are gone")
        pending = {o: p for o, p in pending.items() if o in still}
        if not pending:
            return "lapsed", "every session waited for lapsed"
        now = time.monotonic()
        if now >= deadline:
            return "timed out", f"still there when the wait ran out: {', '.join(names[o] for o in sorted(pending))}"
        lives = await session_lives(source, pending)
        for life in lives.values():
            watched.see(life, now)
        renewed = [names[o] for o in sorted(pending) if o in watched.renewed]
        if renewed:
            return "renewed", f"renewed, it will not lapse: {', '.join(renewed)}"
        if now - said_at >= PROGRESS_SECONDS:
            said_at = now
            shown = ", ".join(_short(lives[o]) if o in lives else names[o] for o in sorted(pending))
            say(f"waiting up to {_seconds(deadline - now)} more for {len(pending)} session(s) no agent holds to "
                f"lapse: {shown}")
        await asyncio.sleep(min(LAPSE_POLL, max(deadline - now, 0.05)))
    return "timed out", f"still there when the wait ran out: {', '.join(names[o] for o in sorted(pending))}"


async def _still_there(source: MetadataStore, pending: dict[int, list[str]]) -> set[int]:
    """The owners of ``pending`` that still hold one of their ephemerals (a read that fails counts
    as held)."""
    order = [(owner, path) for owner, paths_ in pending.items() for path in paths_]
    answers = await source.batch([GetOp(path) for _, path in order])
    still: set[int] = set()
    for (owner, _), got in zip(order, answers, strict=True):
        if isinstance(got, MetadataStoreError) or (isinstance(got, tuple) and got[1].owner == owner):
            still.add(owner)
    return still
