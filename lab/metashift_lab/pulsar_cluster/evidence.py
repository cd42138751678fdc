"""What the Pulsar processes themselves say about a migration: the ledgers they created (ids and
times, from their logs), their metadata sessions, the metadata errors they logged, and how long
their metadata operations took (the brokers' Prometheus metrics).

Log lines start with milliseconds since the epoch (``configs.LOG4J2``), so they are placed exactly
against the migration's phases.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass, field

_LINE = re.compile(r"^(\d{13}) (\w+)\s")
#: Every ledger id a broker's id generator hands out: PulsarLedgerIdGenerator creates a sequential
#: node under /ledgers/idgen (or /ledgers/idgen-long/HOB-h for 63-bit ids) and deletes it at once,
#: and Pulsar's metadata store logs the deletion; whether the ledger then gets made or not (a
#: reused id whose ledger still exists fails there: "Failed to create ledger N").
_HANDED_OUT = re.compile(r"Deleting path: /ledgers/idgen(?:-long/HOB-(\d+))?/ID-(\d+)")
#: And every ledger a managed ledger created.
_CREATED = re.compile(r"ManagedLedgerImpl - \[[^\]]*\] Created (?:new )?ledger (\d+)")
#: What Pulsar's ZooKeeper session watcher logs when the session is gone (SessionLost).
_SESSION_LOST = re.compile(
    r"ZooKeeper session expired|session reconnection timeout|Notifying session is lost|SessionLost|SESSION_EXPIRED"
)
#: Pulsar's session watcher asks ``exists("/")`` every session timeout / 15 (2 s of 30 s); no answer
#: in that time is ConnectionLost ("disconnected"), until an answer comes ("reconnection"): the
#: session is kept, and the process carries on by itself.
_DISCONNECTED = "ZooKeeper client is disconnected"
_RECONNECTED = "ZooKeeper client reconnection with server quorum"
#: An ERROR line about the metadata store (ZooKeeper's client, Pulsar's metadata layer, etcd).
_METADATA = re.compile(r"metadata|zookeeper|keeper|etcd|BadVersion|NoNode|NodeExists", re.IGNORECASE)
#: The largest finite bucket of Pulsar 4.0's metadata operation histogram (ms).
LARGEST_OPS_BUCKET_MS = 5000.0
#: Pulsar's histogram of metadata store operations (milliseconds).
_OPS_BUCKET = re.compile(r'^pulsar_metadata_store_ops_latency_ms_bucket\{(?P<labels>[^}]*)\}\s+(?P<count>[0-9.eE+]+)')


def lines(text: str) -> list[tuple[float, str, str]]:
    """(wall clock in seconds, level, line) of every timestamped line."""
    out = []
    for line in text.splitlines():
        found = _LINE.match(line)
        if found:
            out.append((int(found.group(1)) / 1000.0, found.group(2), line))
    return out


def ledger_creations(texts: list[str]) -> list[tuple[float, int]]:
    """(when, ledger id) of every ledger id the brokers handed out or created a ledger with, in
    time order (an id may show twice: handed out, then created)."""
    found = []
    for text in texts:
        for ts, _level, line in lines(text):
            if m := _HANDED_OUT.search(line):
                high = int(m.group(1) or 0)
                found.append((ts, (high << 32) | int(m.group(2))))
            elif m := _CREATED.search(line):
                found.append((ts, int(m.group(1))))
    return sorted(found)


@dataclass
class LedgerIds:
    """Ledger ids handed out before the freeze and after the switch."""

    before: list[int] = field(default_factory=list)
    after: list[int] = field(default_factory=list)
    reused: list[int] = field(default_factory=list)
    """Ids handed out after the switch that are not above every id handed out before the freeze."""

    def summary(self) -> str:
        def span(ids: list[int]) -> str:
            return f"{len(ids)} ids, {min(ids)}..{max(ids)}" if ids else "none"

        return f"before the freeze: {span(self.before)}; after the switch: {span(self.after)}; reused: {self.reused}"


#: Seconds after the switch before a ledger's creation counts as "after the switch": a ledger whose
#: id ZooKeeper handed out just before the freeze has its metadata written (held, then released)
#: just after the switch; it is logged then, with its older id.
SETTLE_S = 5.0


def ledger_ids(creations: list[tuple[float, int]], freeze_start: float, switched: float) -> LedgerIds:
    """Every ledger id handed out ``SETTLE_S`` after the switch must be above every id handed out
    before the freeze: one that is not was handed out twice (BookKeeper then either fails to make
    the ledger, or makes a second ledger under the id of a deleted one: data corruption)."""
    result = LedgerIds()
    result.before = sorted({i for ts, i in creations if ts < freeze_start})
    result.after = sorted({i for ts, i in creations if ts > switched + SETTLE_S})
    top = max(result.before, default=-1)
    result.reused = [i for i in result.after if i <= top]
    return result


#: A ledger BookKeeper could not make under the id handed out (its metadata already there).
_CREATE_FAILED = re.compile(r"Failed to create ledger (\d+)")


@dataclass
class HandedOutAgain:
    """Ledger ids the generator handed out from the switch on that are not above every id seen
    before it: no settling time (``ledger_ids`` waits ``SETTLE_S``), as a hand-out is logged when
    the generator's create returns, which a freeze holds until it is made in the target."""

    ids: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    """Of those, the ids a managed ledger then made a ledger under (a second ledger of that id)."""
    refused: int = 0
    """Ledger creations refused from the switch on because the id's ledger was there already."""


def handed_out_again(texts: list[str], switched: float) -> HandedOutAgain:
    """Every id handed out at or after ``switched`` must be above every id handed out or created
    before it (``HandedOutAgain``)."""
    found = HandedOutAgain()
    top = max((i for ts, i in ledger_creations(texts) if ts < switched), default=-1)
    for text in texts:
        for ts, _level, line in lines(text):
            if ts < switched:
                continue
            if (m := _HANDED_OUT.search(line)) and ((int(m.group(1) or 0) << 32) | int(m.group(2))) <= top:
                found.ids.append((int(m.group(1) or 0) << 32) | int(m.group(2)))
            elif (m := _CREATED.search(line)) and int(m.group(1)) <= top:
                found.created.append(int(m.group(1)))
            elif _CREATE_FAILED.search(line):
                found.refused += 1
    found.ids.sort()
    found.created = sorted(set(found.created) & set(found.ids))
    return found


def sessions_lost(text: str) -> list[str]:
    """Lines where the process's metadata session was lost or expired."""
    return [line for _ts, _level, line in lines(text) if _SESSION_LOST.search(line)]


def disconnections(text: str) -> list[tuple[float, float | None]]:
    """(from, to) of each time the process's session watcher saw no answer from its metadata
    store (ConnectionLost) until one came (``None``: none came before the log ends)."""
    out: list[tuple[float, float | None]] = []
    since: float | None = None
    for ts, _level, line in lines(text):
        if _DISCONNECTED in line and since is None:
            # the watcher logs after its first unanswered tick
            since = ts
        elif _RECONNECTED in line and since is not None:
            out.append((since, ts))
            since = None
    if since is not None:
        out.append((since, None))
    return out


#: Pulsar's own race when two brokers create one topic's schema at once (a system topic's, at a
#: cluster's start): the one whose compare-and-set of the schema locator fails deletes the ledger
#: it wrote the schema to (BookkeeperSchemaStorage) while that ledger's close may still be
#: updating its metadata, which then logs an ERROR from MetadataUpdateLoop for that ledger.
_SCHEMA_RACE = re.compile(r"Failed to create schema locator with position, schemaId \S+, ledgerId (\d+)")
_UPDATE_LOOP = re.compile(r"MetadataUpdateLoop - UpdateLoop\(ledgerId=(\d+),")


def schema_race_ledgers(texts: list[str]) -> set[int]:
    """Ledgers a broker deleted after losing the race for a schema locator (``_SCHEMA_RACE``)."""
    return {int(m.group(1)) for text in texts for m in _SCHEMA_RACE.finditer(text)}


def metadata_errors(text: str, schema_races: Collection[int] = ()) -> list[str]:
    """ERROR lines about the metadata store, each with the exception logged under it (the next
    line, when it is not a line of its own): the cause is what a failure report needs. The
    MetadataUpdateLoop errors of ``schema_races`` ledgers (``schema_race_ledgers``) are Pulsar's
    own, not the metadata store's, and are left out."""
    out = []
    rows = text.splitlines()
    for i, line in enumerate(rows):
        found = _LINE.match(line)
        if not found or found.group(2) != "ERROR" or not _METADATA.search(line):
            continue
        if (loop := _UPDATE_LOOP.search(line)) and int(loop.group(1)) in schema_races:
            continue
        cause = rows[i + 1].strip() if i + 1 < len(rows) and not _LINE.match(rows[i + 1]) else ""
        out.append(f"{line} | {cause}" if cause else line)
    return out


def restarts(text: str, ready_marker: str) -> int:
    """How many times the process became ready in this log (more than once: it restarted)."""
    return sum(1 for _ts, _level, line in lines(text) if ready_marker in line)


def max_metadata_op_ms(metrics_text: str) -> float | None:
    """An upper bound of the broker's longest metadata store operation since it started: the
    smallest histogram bucket holding every operation, over every operation type (``None`` when
    the broker exposes no such histogram)."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    for line in metrics_text.splitlines():
        m = _OPS_BUCKET.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        le = labels.pop("le", "+Inf")
        key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        buckets.setdefault(key, []).append((float("inf") if le == "+Inf" else float(le), float(m.group("count"))))
    if not buckets:
        return None
    worst = 0.0
    for series in buckets.values():
        series.sort()
        total = series[-1][1]
        if total == 0:
            continue
        bound = next(le for le, count in series if count >= total)
        worst = max(worst, bound)
    return worst


def scrape(web_url: str, timeout: float = 30.0) -> str:
    """A broker's Prometheus metrics."""
    with urllib.request.urlopen(f"{web_url}/metrics/", timeout=timeout) as answer:
        return str(answer.read().decode(errors="replace"))
