"""The migration of a real Pulsar cluster under traffic, and what it is judged by.

``MigrationRun``: the workload starts (producers, consumers, the admin loop); ``metashift migrate
start --wait`` moves the metadata from the source store to the target as an operator runs it; the
traffic goes on after the switch, then every message is accounted for; the Pulsar processes' own
logs and metrics are read (restarts, lost sessions, metadata errors, ledger ids, the longest
metadata operation); last, the bookie and brokers are restarted on Pulsar's own URLs of the target
with no agent and must read everything back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from metashift.migration import paths
from metashift.migration.flag import read_flag
from metashift.stores import open_store
from metashift_lab.agents import freeze_window
from metashift_lab.cli_runner import run_cli

from . import evidence, guide, on_target, workload
from .admin import PulsarAdmin
from .cluster import BOOKIE_READY, BROKER_READY, PulsarCluster
from .figures import PulsarFigures, metadata_op_text
from .pip454 import START_FAILED, Pip454Figures
from .traffic import Traffic

#: Bounds that turn a hang into a failure.
MIGRATION_S = 900.0
ADMIN_S = 120.0
ABORT_WAIT_S = 300.0
ABORT_TTL = 4242
#: Ledgers the brokers must have created on the target before the traffic stops (within a bound).
LEDGERS_AFTER = 4
LEDGERS_AFTER_S = 180.0


class MigrationRun:
    """One cluster's workload and migration (the steps are public: the tests compose them)."""

    def __init__(self, cluster: PulsarCluster, say: Callable[[str], None] = print) -> None:
        self.cluster = cluster
        self.say = say
        self.admin = PulsarAdmin(*cluster.web_urls)
        self.traffic = Traffic(cluster.service_urls[0], workload.traffic_topics())
        self.admin_loop = workload.AdminLoop(self.admin, self.traffic)
        self.figures = PulsarFigures(cluster.release.version)
        self.phase = "NOT_STARTED"
        self.reason: str | None = None
        self.switched_at: float | None = None
        self.freeze: tuple[float, float] | None = None
        self.pip454 = Pip454Figures() if cluster.release.ships_pip454 else None
        """A 4.2+ release: what PIP-454's own code did (``pip454``)."""

    async def start_workload(self) -> None:
        await asyncio.to_thread(workload.set_up, self.admin)
        await asyncio.to_thread(self.traffic.start)
        self.admin_loop.start()
        self.say(f"traffic on {len(self.traffic.topics)} topics in {', '.join(workload.NAMESPACES)}; "
                 "namespace policies updated every second")  # fmt: skip

    async def bundle_owners(self) -> dict[str, int]:
        """Bundles owned per broker (both must own some)."""
        owners = {}
        for web in self.cluster.web_urls:
            owners[web] = len(await asyncio.to_thread(self.admin.owned_bundles, web))
        return owners

    async def migrate(self, *, change_topics: bool = True) -> int:
        """``metashift migrate start --wait``; the admin loop creates and deletes its topics as soon
        as the migration starts. Returns the command's exit status."""
        c = self.cluster
        if change_topics:
            self.admin_loop.change_topics.set()
        args = guide.command("migrate", source=c.source_url, target=c.target_url)
        self.say(f"metashift {' '.join(args)}")
        watching = asyncio.get_running_loop().create_task(self._pip454_during()) if self.pip454 else None
        code, _out, err = await run_cli(*args, within=MIGRATION_S)
        if code not in (0, 1):
            self.say(f"metashift migrate start exited with {code}: {err.strip()[-2000:]}")
        if watching is not None:
            await asyncio.wait_for(watching, ADMIN_S * 2)
        await self.read_outcome()
        if self.pip454 is not None and self.phase == "COMPLETED":
            await asyncio.to_thread(self.pip454.read_status, self.admin, "after")
        return code

    async def _pip454_during(self) -> None:
        """While metashift copies (SYNCING): PIP-454's status, and a start of its own (into a
        reachable Oxia: the target when it is one, else one of its own), which must start nothing."""
        assert self.pip454 is not None
        c = self.cluster
        if not await _until(lambda: self._phase_is("SYNCING"), ADMIN_S):
            self.pip454.troubles.append("pip454: the migration was never seen in SYNCING")
            return
        await asyncio.to_thread(self.pip454.read_status, self.admin, "during")
        oxia = c.native_url("oxia") if c.target == "oxia" else ""
        if c.pip454_oxia is not None:
            oxia = f"oxia://{c.pip454_oxia.address}"
        if oxia:
            await asyncio.to_thread(self.pip454.try_start, self.admin, oxia)
            self.say(f"pulsar-admin metadata-migration start --target {oxia} while metashift migrates: "
                     f"{self.pip454.start}")

    async def read_outcome(self) -> None:
        """The migration's phase, reason and switch time (from the flag), and the freeze (from the
        agents' logs: first write gate closed to last reopened)."""
        store = await open_store(self.cluster.source_url, watch=False, create_root=False)
        try:
            flag = await read_flag(store)
        finally:
            await store.close()
        if flag is not None:
            self.phase, self.reason = flag.phase.value, flag.reason
            if self.phase == "COMPLETED":
                self.switched_at = flag.phase_since / 1000.0
        self.freeze = freeze_window([a.log_tail(chars=50_000_000) for a in self.cluster.agents])
        self.say(f"migration {self.phase}" + (f": {self.reason}" if self.reason else ""))

    async def abort_midway(self) -> None:
        """``metashift migrate start`` (no wait), then ``metashift migrate abort`` while it copies:
        FAILED, the target emptied again, and Pulsar carrying on on the source (a namespace policy
        written lands there, messages keep being acknowledged). What does not hold is a trouble."""
        c, f = self.cluster, self.figures
        code, _out, err = await run_cli("migrate", "start", "--source", c.source_url, "--target", c.target_url,
                                        within=MIGRATION_S)
        if code != 0:
            f.troubles.append(f"abort: migrate start exited with {code}: {err.strip()[-300:]}")
            return
        if not await _until(lambda: self._phase_is("SYNCING"), ABORT_WAIT_S):
            f.troubles.append("abort: the migration never reached SYNCING")
            return
        await asyncio.sleep(2.0)  # the copy under way
        code, _out, err = await run_cli("migrate", "abort", "--source", c.source_url, within=MIGRATION_S)
        status = await self.status()
        if code != 0 or status.get("phase") != "FAILED" or status.get("reason") != "aborted":
            f.troubles.append(f"abort: exit {code}, then {status.get('phase')} ({status.get('reason')}): {err[-300:]}")
            return
        if not await _until(self._target_cleaned, ABORT_WAIT_S):
            f.troubles.append("abort: the target was not emptied after FAILED")
        acknowledged = self.traffic.counts()["messages_acknowledged"]
        # the admin loop sets TTLs on ns-a only: this one is ours
        await asyncio.to_thread(self.admin.set_message_ttl, workload.NAMESPACES[1], ABORT_TTL)
        policies = await self._source_json(f"/admin/policies/{workload.NAMESPACES[1]}")
        if (policies or {}).get("message_ttl_in_seconds") != ABORT_TTL:
            f.troubles.append(f"abort: a policy written after FAILED is not in the source: {policies}")
        flowing = await _until(lambda: _true(self.traffic.counts()["messages_acknowledged"] > acknowledged + 50),
                               ABORT_WAIT_S)  # fmt: skip
        if not flowing:
            f.troubles.append("abort: messages stopped being acknowledged after FAILED")
        self.say(f"abort: migrate abort in SYNCING -> FAILED (aborted); target emptied; a policy written after "
                 f"landed in the source; messages acknowledged since: "
                 f"{self.traffic.counts()['messages_acknowledged'] - acknowledged}")  # fmt: skip

    async def status(self) -> dict[str, Any]:
        """``metashift migrate status --json``."""
        return await self._status("status", self.cluster.source_url)

    async def _status(self, step: str, url: str) -> dict[str, Any]:
        """``metashift migrate status`` of ``url`` as the guide's ``step`` shows it, read as JSON."""
        c = self.cluster
        source, target = (url, c.target_url) if url == c.source_url else (c.source_url, url)
        code, out, err = await run_cli(*guide.command(step, source=source, target=target, json_output=True),
                                        within=ADMIN_S)  # fmt: skip
        if code != 0:
            return {"error": err.strip()[-300:]}
        return dict(json.loads(out))

    async def guide_checks(self) -> None:
        """The operator's guide's checks once every member runs on the target's own URL and the
        agents are gone: read from the target, the cluster lives there (arrived from the source);
        read from the source, nothing was written there since the switch (but by a member a forced
        start let pass, whose writes status names)."""
        c, f = self.cluster, self.figures
        here = await self._status("after-switch-check", c.target_url)
        if here.get("lives_here") is not True or (here.get("origin") or {}).get("epoch") is None:
            f.troubles.append(f"guide: status read from the target does not say the cluster lives there: {here}")
        left = await self._status("retire-check", c.source_url)
        written = left.get("writes_after_switch") or {}
        if left.get("phase") != "COMPLETED" or left.get("lives_on") is None:
            f.troubles.append(f"guide: status read from the source does not say where the cluster went: {left}")
        elif written.get("count") and not left.get("forced"):
            f.troubles.append(f"guide: writes into the source after the switch: {written}")
        self.say(f"guide: the cluster lives in the target (epoch {(here.get('origin') or {}).get('epoch')}); "
                 f"writes into the source after the switch: {written.get('count', 0)}")

    async def _target_cleaned(self) -> bool:
        return bool((await self.status()).get("target_cleaned"))

    async def _phase_is(self, phase: str) -> bool:
        flag = await self._source_json(paths.FLAG)
        return flag is not None and flag.get("phase") == phase

    async def _source_json(self, path: str) -> dict[str, Any] | None:
        store = await open_store(self.cluster.source_url, watch=False, create_root=False)
        try:
            got = await store.get(path)
        finally:
            await store.close()
        return None if got is None else dict(json.loads(got[0]))

    async def check_pulsar_admin(self) -> None:
        """``pulsar-admin`` against the migrated cluster (``on_target.check_pulsar_admin``)."""
        await on_target.check_pulsar_admin(self.cluster, self.figures, self.say)

    async def finish_traffic(self, after: float) -> None:
        """``after`` more seconds of traffic (and, after a switch, until the brokers have created a
        few ledgers on the target: the ledger-id check needs some), then stop it and account for
        every message."""
        await asyncio.sleep(after)
        deadline = time.monotonic() + LEDGERS_AFTER_S
        while self.switched_at is not None and time.monotonic() < deadline:
            creations = evidence.ledger_creations(self.cluster.broker_logs())
            if sum(1 for ts, _ in creations if ts > self.switched_at + evidence.SETTLE_S) >= LEDGERS_AFTER:
                break
            await asyncio.sleep(1.0)
        self.admin_loop.stop()
        await asyncio.to_thread(self.traffic.stop)
        f = self.figures
        counts = self.traffic.counts()
        f.messages_published = counts["messages_published"]
        f.messages_acknowledged = counts["messages_acknowledged"]
        f.messages_received = counts["messages_received"]
        f.messages_lost = counts["messages_lost"]
        f.messages_duplicated = counts["messages_duplicated"]
        f.messages_failed = counts["messages_failed"]
        f.max_publish_latency_ms = self.traffic.max_publish_latency_ms()
        if self.freeze is not None:
            f.freeze_publish_latency_ms = self.traffic.max_publish_latency_ms(self.freeze)
        f.admin_updates = self.admin_loop.updates
        f.troubles += [f"admin: {e}" for e in self.admin_loop.errors[:10]]
        f.troubles += [f"client: {e}" for e in self.traffic.errors()[:10]]
        self.say(f"messages: {f.messages_published} published, {f.messages_acknowledged} acknowledged, "
                 f"{f.messages_received} received, {f.messages_lost} lost, {f.messages_duplicated} duplicated; "
                 f"longest publish {f.max_publish_latency_ms:.0f} ms "
                 f"({f.freeze_publish_latency_ms:.0f} ms through the freeze)")  # fmt: skip

    async def read_evidence(self) -> None:
        """The Pulsar processes' own account: still the same processes, no lost session, no metadata
        error, ledger ids, the longest metadata operation."""
        f, c = self.figures, self.cluster
        schema_races = evidence.schema_race_ledgers(c.broker_logs())
        for process in c.pulsar_processes:
            text = process.log_text()
            marker = BOOKIE_READY if process.name.startswith("bookie") else BROKER_READY
            if not process.running or process.starts != 1 or evidence.restarts(text, marker) != 1:
                f.troubles.append(f"{process.name}: restarted or stopped (running={process.running})")
            name = process.name
            f.troubles += [f"{name} session lost: {line[:300]}" for line in evidence.sessions_lost(text)[:5]]
            for since, until in evidence.disconnections(text):
                if until is None:
                    f.troubles.append(f"{name}: no answer from its metadata store since {_clock(since)}")
                else:
                    f.disconnections.append(f"{name}: no answer from its metadata store for {until - since:.1f} s "
                                            f"from {_clock(since)} (ConnectionLost, then reconnected by itself)")
            errors = evidence.metadata_errors(text, schema_races)
            if self.pip454 is not None and self.pip454.start is not None:  # the start refused on purpose
                errors = [line for line in errors if not START_FAILED.search(line)]
            f.troubles += [f"{name} metadata error: {line[:600]}" for line in errors[:5]]
        worst = None
        for web in c.web_urls:
            try:
                bound = evidence.max_metadata_op_ms(await asyncio.to_thread(evidence.scrape, web))
            except OSError as e:
                f.troubles.append(f"metrics of {web}: {e}")
                continue
            if bound is not None:
                worst = bound if worst is None else max(worst, bound)
        f.max_metadata_op_ms = worst
        if self.freeze is not None and self.switched_at is not None:
            creations = evidence.ledger_creations(c.broker_logs())
            ids = evidence.ledger_ids(creations, self.freeze[0], self.switched_at)
            f.ledger_ids = ids.summary()
            f.ledger_ids_reused = len(ids.reused)
        if self.pip454 is not None:
            self.pip454.read_logs([p.log_text() for p in c.history])
            f.pip454 = self.pip454.to_dict()
            f.troubles += self.pip454.troubles
            self.say(f"PIP-454's code: {self.pip454.registered} DualMetadataStore(s) registered, "
                     f"{len(self.pip454.acted)} step(s) taken; its status during and after: {self.pip454.status}")
        longest = metadata_op_text(f.max_metadata_op_ms)
        self.say(f"ledger ids {f.ledger_ids}; longest broker metadata operation {longest}")
        for line in f.disconnections:
            self.say(line)
        for trouble in f.troubles[:20]:
            self.say(f"trouble: {trouble}")

    async def restart_native(self) -> None:
        """Bookie and brokers on the target store's own URLs, no agent (``on_target.restart_native``)."""
        await on_target.restart_native(self.cluster, self.figures, self.traffic, self.say)
        await self.guide_checks()


async def _until(check: Callable[[], Awaitable[bool]], within: float) -> bool:
    """Poll ``check`` until it holds (True) or ``within`` seconds pass (False)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.25)
    return False


async def _true(value: bool) -> bool:
    return value


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


async def run(cluster: PulsarCluster, *, warmup: float = 10.0, after: float = 10.0, abort_first: bool = False,
              say: Callable[[str], None] = print) -> MigrationRun:  # fmt: skip
    """The whole scenario on a started cluster: workload, (an aborted migration,) the migration,
    accounting, evidence, pulsar-admin and the restart on the target (only after COMPLETED)."""
    run = MigrationRun(cluster, say)
    await run.start_workload()
    await asyncio.sleep(warmup)
    run.figures.bundle_owners = await run.bundle_owners()
    say("bundles owned: " + ", ".join(f"{web} {n}" for web, n in run.figures.bundle_owners.items()))
    if abort_first:
        await run.abort_midway()
    started = time.monotonic()
    await run.migrate()
    say(f"migration took {time.monotonic() - started:.1f}s")
    await run.finish_traffic(after)
    await run.read_evidence()
    if run.phase == "COMPLETED":
        await run.check_pulsar_admin()
        await run.restart_native()
    return run
