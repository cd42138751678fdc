"""PIP-454's own migration beside metashift's, measured on the same cluster shape and traffic
(``bench/pip454_vs_metashift.py``): two runs, one after the other, each a fresh cluster of Pulsar
4.2.4 (a bookie, two brokers, ledgers rolling every 20 entries; producers and consumers counting
every message, the admin loop), migrated from ZooKeeper into Oxia under that traffic.

- ``pip454``: born on ZooKeeper with no agent, as PIP-454's documentation requires; its own
  ``metadata-migration start`` (``pip454_run``).
- ``metashift``: on its agents (the sandbox's shape); ``metashift migrate start --wait``.

Each ``Side`` holds what the table shows: publishes, the longest ones, admin calls, messages lost
and duplicated, ledger ids reused, time to COMPLETED, time writes were refused or held,
``metashift verify`` of the target against the source, and the way back.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import evidence
from .cluster import PulsarCluster, PulsarStartError
from .pip454_run import Pip454Logs, Pip454Migration
from .release import PulsarRelease
from .scenario import MigrationRun
from .target_check import SHOWN, source_writes, verify

PIP454, METASHIFT = "pip454", "metashift"
KINDS = (PIP454, METASHIFT)
_CLOCK = re.compile(r"^\d\d:\d\d:\d\d ")


@dataclass
class Side:
    """One migration of the benchmark, as its table and JSON show it."""

    kind: str
    how: str = ""
    phase: str = "-"
    published: int = 0
    acknowledged: int = 0
    failed: int = 0
    publish_errors: list[str] = field(default_factory=list)
    """Distinct answers to failed publishes, ``N x answer``, the most frequent first."""
    lost: int = 0
    lost_first: list[str] = field(default_factory=list)
    duplicated: int = 0
    max_publish_ms: float = 0.0
    max_publish_migrating_ms: float = 0.0
    """The longest publish in flight between the start and COMPLETED."""
    max_publish_paused_ms: float = 0.0
    """The longest publish in flight while writes were refused (PIP-454) or held (metashift)."""
    admin_calls: int = 0
    admin_failed: int = 0
    admin_errors: list[str] = field(default_factory=list)
    ledger_ids_reused: int = 0
    """The Pulsar tests' check (``evidence.ledger_ids``): ids handed out 5 s after the switch and
    later not above every id handed out before the writes were refused or held."""
    ledger_ids: str = ""
    handed_out_again: list[int] = field(default_factory=list)
    """Ids handed out from the switch on, at once, not above every id before it (``evidence.handed_out_again``)."""
    ledgers_made_again: list[int] = field(default_factory=list)
    """Of those, the ids a second ledger was made under."""
    ledger_creations_refused: int = 0
    to_completed_s: float | None = None
    """From the start command to COMPLETED (the flag's write)."""
    paused_s: float | None = None
    """PIP-454: PREPARATION to COMPLETED, its participants' own writes refused; metashift: the
    freeze, first write gate closed to last reopened, writes held."""
    refused_writes: int | None = None
    """PIP-454: log records of writes refused ("Write operations not allowed during migrations")."""
    sessions_lost: int = 0
    metadata_errors: int = 0
    """ERROR records about the metadata store in the Pulsar processes' logs."""
    source_writes: dict[str, Any] = field(default_factory=dict)
    """Writes that landed in the source from the refusal or hold on, read at COMPLETED
    (``source_writes``): each carried into the target, or not."""
    verify: dict[str, Any] = field(default_factory=dict)
    way_back: str = ""
    native: dict[str, Any] | None = None
    """The restart on Oxia's own URL with no agent (``--native``)."""
    detail: dict[str, Any] = field(default_factory=dict)
    troubles: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def measure(
    kind: str, release: PulsarRelease, work_dir: Path, *, warmup: float, after: float, native: bool = False,
    keep: bool = False, say: Callable[[str], None] = print,
) -> Side:  # fmt: skip
    """One run: a fresh cluster, the workload, the migration of ``kind``, every message accounted
    for, the Pulsar processes' logs read, the target verified, the way back tried; the cluster
    cleaned up whatever happens."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    started = time.monotonic()
    direct = kind == PIP454
    cluster = PulsarCluster(work_dir, release, source="zk", target="oxia", born_direct=direct, agents=not direct,
                            say=say)  # fmt: skip
    side = Side(kind)
    try:
        try:
            await cluster.start()
        except PulsarStartError as e:
            side.phase = f"the cluster did not start: {str(e)[:300]}"
            return side
        run = MigrationRun(cluster, say)
        run.pip454 = None  # the sandbox's check that PIP-454 stays idle behind the agents: not here
        await run.start_workload()
        await asyncio.sleep(warmup)
        run.figures.bundle_owners = await run.bundle_owners()
        say("bundles owned: " + ", ".join(f"{web} {n}" for web, n in run.figures.bundle_owners.items()))
        pip454 = await _migrate_pip454(run, side) if direct else None
        if not direct:
            await _migrate_metashift(run, side)
        await run.finish_traffic(after)
        await run.read_evidence()
        _account(run, side)
        if pip454 is not None:
            _pip454_logs(run, side, pip454)
        if run.phase == "COMPLETED":
            side.verify = await verify(cluster, say)
            if pip454 is not None:
                await pip454.try_way_back()
                side.detail["pip454"] = pip454.to_dict()
            if native:
                await run.restart_native()
                side.native = dict(run.figures.native_restart)
                side.ledger_ids_reused = run.figures.ledger_ids_reused
                if pip454 is not None:
                    await pip454.try_start_on_native()
                    side.detail["pip454"] = pip454.to_dict()
        side.way_back = _way_back(side, pip454, cluster)
        side.troubles = list(run.figures.troubles)
    finally:
        await cluster.cleanup(keep=keep)
        if keep:
            say(f"kept the work directory {work_dir}")
    side.seconds = round(time.monotonic() - started, 1)
    return side


async def _migrate_pip454(run: MigrationRun, side: Side) -> Pip454Migration:
    """``pulsar-admin metadata-migration start --target oxia://...`` (its REST call), the admin loop
    creating and deleting its topics as it starts, then its flag followed to COMPLETED or FAILED."""
    c = run.cluster
    migration = Pip454Migration(c, run.admin)
    side.how = f"POST {c.web_urls[0]}/admin/v2/metadata/migration/start?target={migration.target}"
    run.admin_loop.change_topics.set()
    run.say(f"PIP-454: {side.how}")
    await migration.start()
    run.say(f"PIP-454: start answered {migration.http} {migration.answer}".rstrip())
    if migration.http == 204:
        await migration.follow()
    run.phase = migration.phase
    run.say(f"PIP-454: {migration.phase}; the flag seen " + ", ".join(
        f"{p} at +{t - migration.started_at:.2f} s" for p, t in migration.seen))  # fmt: skip
    if migration.refusing is not None:
        run.freeze = migration.refusing
        side.paused_s = round(migration.refusing[1] - migration.refusing[0], 3)
    if migration.phase == "COMPLETED" and migration.completed_at is not None:
        run.switched_at = migration.completed_at
        side.to_completed_s = round(migration.completed_at - migration.started_at, 2)
        if migration.prepared_at is not None:
            side.source_writes = await source_writes(c, migration.prepared_at)
        await migration.read_status()
    side.detail["pip454"] = migration.to_dict()
    side.detail["migrating"] = [migration.started_at, migration.completed_at]
    return migration


async def _migrate_metashift(run: MigrationRun, side: Side) -> None:
    """``metashift migrate start --wait`` (``MigrationRun.migrate``)."""
    c = run.cluster
    side.how = f"metashift migrate start --source {c.source_url} --target {c.target_url} --wait"
    started = time.time()
    await run.migrate()
    if run.switched_at is not None:
        side.to_completed_s = round(run.switched_at - started, 2)
        if run.freeze is not None:
            side.source_writes = await source_writes(c, run.freeze[0])
    if run.freeze is not None:
        side.paused_s = round(run.freeze[1] - run.freeze[0], 3)
    side.detail["migrating"] = [started, run.switched_at]


def _account(run: MigrationRun, side: Side) -> None:
    """The traffic's and the admin loop's figures, and what the Pulsar processes logged."""
    f, traffic = run.figures, run.traffic
    side.phase = run.phase
    side.published, side.acknowledged, side.failed = f.messages_published, f.messages_acknowledged, f.messages_failed
    side.lost, side.duplicated = f.messages_lost, f.messages_duplicated
    side.publish_errors = _top(traffic.failures())
    side.max_publish_ms = f.max_publish_latency_ms
    side.max_publish_paused_ms = f.freeze_publish_latency_ms
    begun, completed = side.detail.get("migrating") or [None, None]
    if begun is not None:
        side.max_publish_migrating_ms = traffic.max_publish_latency_ms((begun, completed or time.time()))
    errors = run.admin_loop.errors
    side.admin_failed = len(errors)
    side.admin_calls = run.admin_loop.updates + len(errors)
    side.admin_errors = _top(Counter(_CLOCK.sub("", e)[:200] for e in errors))
    side.lost_first = sorted(m for t in traffic.topics.values() for m in t.lost)[:SHOWN]
    side.ledger_ids_reused, side.ledger_ids = f.ledger_ids_reused, f.ledger_ids
    if run.switched_at is not None:
        again = evidence.handed_out_again(run.cluster.broker_logs(), run.switched_at)
        side.handed_out_again, side.ledgers_made_again = again.ids, again.created
        side.ledger_creations_refused = again.refused
    for process in run.cluster.history:
        text = process.log_text()
        side.sessions_lost += len(evidence.sessions_lost(text))
        side.metadata_errors += len(evidence.metadata_errors(text))


def _pip454_logs(run: MigrationRun, side: Side, migration: Pip454Migration) -> None:
    logs = Pip454Logs.read({p.log_path.name: p.log_text() for p in run.cluster.history})
    side.refused_writes = logs.refused_writes
    side.detail["pip454_logs"] = logs.to_dict()
    run.say(f"PIP-454: {logs.refused_writes} refused writes logged ({logs.refused_by}); copied {logs.copied} "
            f"records; status after: {migration.status_after}")  # fmt: skip


def _top(counts: Counter[str]) -> list[str]:
    return [f"{n} x {what}" for what, n in counts.most_common(SHOWN)]


def _way_back(side: Side, migration: Pip454Migration | None, cluster: PulsarCluster) -> str:
    if migration is None:
        return ("yes: metashift migrate start --source " + cluster.target_url + " --target " + cluster.source_url
                if side.phase == "COMPLETED" else "not migrated")  # fmt: skip
    back = migration.way_back
    if not back:
        return "no (not tried: not COMPLETED)"
    said = f"no: start --target {back['target']} answered {back['http']} {back['said']}"
    if on_oxia := back.get("on_oxia"):
        said += f"; on Oxia's own URL, {on_oxia['http']} {on_oxia['said']}"
    return said


# ---- the table --------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _ids(ids: list[int]) -> str:
    if not ids:
        return "0"
    shown = ", ".join(str(i) for i in ids[:SHOWN]) + (", ..." if len(ids) > SHOWN else "")
    return f"{len(ids)} ({shown})"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} s"


def _writes(found: dict[str, list[str]]) -> str:
    if not found:
        return "-"
    text = " / ".join(str(len(found[k])) for k in ("carried", "later", "lost"))
    return text + (f" ({'; '.join(found['lost'][:SHOWN])})" if found["lost"] else "")


def _verified(v: dict[str, Any]) -> str:
    if not v:
        return "not run"
    if "error" in v:
        return f"verify failed: {v['error'][:120]}"
    below = v["counters_below"]
    text = (f"{v['nodes']:,} nodes: {v['differs']} lacking or behind, {v['moved_on']} moved on since the switch; "
            f"{v['counters'] - len(below)}/{v['counters']} counters above the source")  # fmt: skip
    for path, c in below.items():
        text += f"; {path} next id {c['target_next']:,} in the target, not above {c['source_next']:,}"
    return text


ROWS: tuple[tuple[str, Callable[[Side], str]], ...] = (
    ("how", lambda s: f"`{s.how}`"),
    ("outcome", lambda s: s.phase),
    ("publishes attempted / acknowledged / failed", lambda s: f"{s.published:,} / {s.acknowledged:,} / {s.failed:,}"),
    ("publish errors (distinct, first few)", lambda s: "; ".join(s.publish_errors) or "none"),
    ("longest publish", lambda s: _ms(s.max_publish_ms)),
    ("longest publish from the start to COMPLETED", lambda s: _ms(s.max_publish_migrating_ms)),
    ("longest publish while writes were refused / held", lambda s: _ms(s.max_publish_paused_ms)),
    ("admin calls failed / made", lambda s: f"{s.admin_failed} / {s.admin_calls}"),
    ("admin errors (distinct, first few)", lambda s: "; ".join(s.admin_errors) or "none"),
    ("messages lost / duplicated", lambda s: f"{s.lost:,} / {s.duplicated:,}"),
    ("ledger ids reused (the Pulsar tests' check: from 5 s after the switch)", lambda s: f"{s.ledger_ids_reused:,}"),
    ("ledger ids handed out again from the switch on / ledgers made under them / creations refused",
     lambda s: f"{_ids(s.handed_out_again)} / {_ids(s.ledgers_made_again)} / {s.ledger_creations_refused}"),
    ("start to COMPLETED", lambda s: _s(s.to_completed_s)),
    ("writes refused (PIP-454: PREPARATION to COMPLETED) / held (metashift: the freeze)",
     lambda s: _s(s.paused_s) + ("" if s.refused_writes is None else
                                 f"; {s.refused_writes:,} refused writes in the logs")),
    ("sessions lost / metadata ERRORs in Pulsar's logs", lambda s: f"{s.sessions_lost} / {s.metadata_errors}"),
    ("writes that landed in the source from the refusal / hold on: carried / later in the target / lost",
     lambda s: _writes(s.source_writes)),
    ("target matches the source (`metashift verify`)", lambda s: _verified(s.verify)),
    ("a way back", lambda s: s.way_back),
    ("restart on Oxia's own URL, no agent", lambda s: "not run" if s.native is None else
     f"{'ok' if s.native.get('ok') else 'FAILED'}: {s.native.get('topics')} topics, "
     f"{s.native.get('messages_read'):,} of {s.acknowledged:,} acknowledged messages read back"),
)  # fmt: skip


def table(sides: list[Side]) -> str:
    """A Markdown table: a row per measure, a column per run."""
    names = {PIP454: "PIP-454 (`metadata-migration start`)", METASHIFT: "metashift"}
    lines = ["| | " + " | ".join(names[s.kind] for s in sides) + " |", "|---" * (len(sides) + 1) + "|"]
    for label, cell in ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(s).replace("|", "\\|") for s in sides) + " |")
    return "\n".join(lines)
