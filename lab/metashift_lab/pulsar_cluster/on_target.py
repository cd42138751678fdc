"""The migrated cluster judged on its target: ``pulsar-admin`` (the release's own CLI) against it,
and the bookie and brokers restarted on Pulsar's own URLs of the target store with no agent, which
must read everything back (the last steps of ``scenario.MigrationRun``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from metashift.stores import open_store

from . import evidence, workload
from .admin import PulsarAdmin, pulsar_admin
from .cluster import STORE_NAMES, PulsarCluster
from .figures import PulsarFigures
from .traffic import Traffic, read_backlog, round_trip

#: One pulsar-admin command (a JVM that loads Jersey and the admin client) on a loaded machine.
PULSAR_ADMIN_S = 600.0


async def check_pulsar_admin(cluster: PulsarCluster, figures: PulsarFigures, say: Callable[[str], None]) -> None:
    """``pulsar-admin`` (the release's own CLI) against the migrated cluster, through broker-2:
    it lists and reads what the workload made, sets a retention and creates a topic, and what
    it changed is in the target. Each command is a JVM of its own (seconds to start on a loaded
    machine): a handful of them."""
    c, f = cluster, figures
    problems: list[str] = []
    ns_a, ns_b = workload.NAMESPACES

    async def admin(*args: str) -> str:
        command = f"pulsar-admin {' '.join(args)}"
        try:
            done = await asyncio.to_thread(pulsar_admin, c.release, c.web_urls[-1], list(args), c.work_dir,
                                           PULSAR_ADMIN_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            problems.append(f"{command}: no answer within {PULSAR_ADMIN_S:g}s")
            return ""
        if done.returncode != 0:
            problems.append(f"{command}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
        return done.stdout

    topics = set((await admin("topics", "list", ns_a)).split())
    if not {f"persistent://{ns_a}/events", f"{workload.CREATED_TOPIC}"} <= topics:
        problems.append(f"pulsar-admin topics list {ns_a}: {sorted(topics)}")
    stats = json_object(await admin("topics", "stats", f"persistent://{ns_a}/events"))
    if not {"sub", "backlog"} <= set(stats.get("subscriptions") or {}):
        problems.append(f"pulsar-admin topics stats: subscriptions {sorted(stats.get('subscriptions') or {})}")
    await admin("namespaces", "set-retention", ns_b, "--size", "10M", "--time", "7h")
    await admin("topics", "create", f"persistent://{ns_b}/made-by-pulsar-admin")
    target = await open_store(c.target_url, watch=False, create_root=False)
    where = STORE_NAMES[c.target]
    try:
        got = await target.get(f"/admin/policies/{ns_b}")
        retention = json_object(got[0].decode()).get("retention_policies") if got else None
        if not retention or retention.get("retentionTimeInMinutes") != 420:
            problems.append(f"the retention pulsar-admin set is not in {where}: {retention}")
        if await target.get(f"/managed-ledgers/{ns_b}/persistent/made-by-pulsar-admin") is None:
            problems.append(f"the topic pulsar-admin created is not in {where}")
    finally:
        await target.close()
    f.troubles += problems
    say(f"pulsar-admin {c.release.admin_version} against the migrated cluster: "
             + ("ok" if not problems else f"{len(problems)} problem(s)"))  # fmt: skip


async def restart_native(cluster: PulsarCluster, figures: PulsarFigures, traffic: Traffic,
                         say: Callable[[str], None]) -> None:
    """Bookie and brokers on Pulsar's own URLs of the target store, no agent: every topic,
    subscription and kept message readable, new messages flow."""
    c, f = cluster, figures
    where = STORE_NAMES[c.target]
    restarted = time.time()
    await c.restart_native()
    admin = PulsarAdmin(*c.web_urls)
    want = workload.expected_topics(traffic)
    problems: list[str] = []
    found = 0
    for namespace, names in want.items():
        listed = await asyncio.to_thread(admin.topics, namespace)
        found += len(set(names) & set(listed))
        if missing := sorted(set(names) - set(listed)):
            problems.append(f"{namespace}: topics missing on {where}: {missing}")
        if workload.DELETED_TOPIC in listed:
            problems.append(f"{workload.DELETED_TOPIC} deleted during the migration is back")
    for topic in traffic.topics:
        subscriptions = await asyncio.to_thread(admin.subscriptions, _first_partition(topic))
        if not {"sub", "backlog"} <= set(subscriptions):
            problems.append(f"{topic}: subscriptions {subscriptions}")
    expected = {t: set(tt.acknowledged) for t, tt in traffic.topics.items()}
    read = await asyncio.to_thread(read_backlog, c.service_urls[0], list(traffic.topics), expected)
    for topic, count in read.items():
        if count < len(expected[topic]):
            problems.append(f"{topic}: {count} of {len(expected[topic])} acknowledged messages read back")
    flowed = 0
    for topic in traffic.topics:
        n = await asyncio.to_thread(round_trip, c.service_urls[1 % len(c.service_urls)], topic)
        flowed += n
        if n < 10:
            problems.append(f"{topic}: {n} of 10 new messages came back on {where}")
    # Pulsar's own generator, reading the target directly now: above every id handed out before
    native = evidence.ledger_ids(evidence.ledger_creations(c.broker_logs()), restarted, restarted)
    if native.reused:
        problems.append(f"ledger ids handed out again on {where} directly: {native.reused[:10]}")
        f.ledger_ids_reused += len(native.reused)
    say(f"ledger ids on {where} directly: {native.summary()}")
    f.native_restart = {"store": c.target, "ok": not problems, "topics": found, "messages_read": sum(read.values())}
    f.troubles += [f"{where} restart: {p}" for p in problems]
    say(f"on {where} directly: {found} topics listed, {sum(read.values())} kept messages read back, "
             f"{flowed} new messages round-tripped" + ("" if not problems else f"; problems: {problems}"))


def json_object(text: str) -> dict[str, Any]:
    """The JSON object ``text`` holds, ``{}`` when it holds none."""
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _first_partition(topic: str) -> str:
    """Subscriptions are listed per partition for a partitioned topic."""
    return f"{topic}-partition-0" if topic.endswith("/orders") else topic
