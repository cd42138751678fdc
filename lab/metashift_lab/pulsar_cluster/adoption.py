"""The adoption path of a cluster that runs on its store directly: a rolling restart onto the
agents' ZooKeeper fronts (the bookie first, then the brokers one by one) with traffic flowing,
``metashift migrate check`` before and after each step, as an operator follows it.

The check must name every member not yet behind its agent and go green exactly when the last one
is. With a broker ``forgotten`` (left on the store directly, writing around the agents): the check
names it, ``migrate start`` refuses and writes nothing, ``migrate start --force --reason`` starts
anyway with the reason and the broker's session in the flag, and ``migrate abort`` takes it back
at once; then the broker is restarted onto its agent after all, and the check goes green.

The forced migration is aborted rather than left to run: with a broker at work around the agents
it fails before COMPLETED only if the broker happens to write where the guard looks (an ephemeral
of its, or into the freeze after its last delta was taken), and otherwise completes and splits the
cluster, which ``status`` on the old store then names (``writes_after_switch``). Both outcomes are
checked on real stores, where they can be made to happen (``tests/test_preflight_migration.py``).
A split Pulsar cluster is not one the rest of this run can be judged on: in a run here, after a
forced migration completed, a bundle of the forgotten broker stayed unserved for minutes after its
restart onto its agent and publishes to it timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metashift.migration.flag import read_flag
from metashift.stores import open_store
from metashift_lab.cli_runner import run_cli, run_cli_json

from . import guide
from .admin import AdminError, PulsarAdmin
from .cluster import AGENT, PulsarCluster
from .workload import TENANT

#: How long a stopped member's registration may outlive it (a session that was not closed ends
#: with its timeout) before the check must be green.
GREEN_WITHIN_S = 120.0
#: Bound on each command of the forced step (``start --force``, ``abort``).
FORCED_S = 600.0
FORCE_REASON = "adoption test: broker left on its store on purpose"
#: The namespace whose policy the forgotten broker keeps writing while the forced migration runs
#: (the workload's admin loop has its own): an operator's admin calls landing on it.
FORGOTTEN_NAMESPACE = f"{TENANT}/ns-forgotten"
#: Seconds between two of those writes: a freeze lasts longer, so one falls into it.
FORGOTTEN_WRITE_S = 0.05


@dataclass
class AdoptionFigures:
    """What the adoption measured; ``to_dict`` is the sandbox report's ``adoption`` field."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    """Per member restarted onto its agent, in order: ``restarted``, ``ready_before`` and
    ``named_before`` (the members the check named as bypassing the agents just before)."""
    ready_after: bool = False
    """The check once every member was behind its agent."""
    forgotten: dict[str, Any] | None = None
    """With a member left off its agent: what the check, ``start``, ``start --force`` and the
    ``abort`` after it did."""
    troubles: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "steps": self.steps, "ready_after": self.ready_after, "forgotten": self.forgotten}

    @property
    def ok(self) -> bool:
        """The check named every member still on the store before each step and went green after
        the last; a forgotten member was named and refused; forced past, the flag carried the
        reason, and the abort took it back (FAILED, aborted) or the member guard failed it first."""
        named_all = all(not s["ready_before"] and s["named_before"] for s in self.steps)
        if self.forgotten is not None:
            f, forced = self.forgotten, self.forgotten.get("forced") or {}
            recorded = (forced.get("forced") or {}).get("reason") == FORCE_REASON
            # taken back by the abort; or failed before it by the coordinator's member guard, on the
            # forgotten member's first write around the agents (nothing left to abort then)
            reason = forced.get("reason") or ""
            aborted = forced.get("phase") == "FAILED" and (
                reason == "aborted" or (forced.get("abort_exit") != 0 and "reaches the source directly" in reason
                                       and any(m in reason for m in f["check_named"])))
            if not (f["check_exit"] == 1 and f["check_named"] and f["start_exit"] == 2 and f["nothing_written"]
                    and recorded and aborted):
                return False
        return named_all and self.ready_after and not self.troubles


def named(report: dict[str, Any]) -> list[str]:
    """"kind name" of every member the check named as reaching the store around the agents."""
    return sorted(f"{m['kind']} {m['name']}" for m in report.get("members", []) if not m.get("agent"))


class Adoption:
    """The rolling restart onto the agents, checked at each step (the module's doc)."""

    def __init__(self, cluster: PulsarCluster, say: Callable[[str], None] = print) -> None:
        self.cluster = cluster
        self.say = say
        self.figures = AdoptionFigures()

    async def check(self, source: str | None = None, target: str | None = None) -> tuple[int, dict[str, Any]]:
        """``metashift migrate check --json`` (of the cluster's source and target unless given):
        its exit status and report."""
        c = self.cluster
        args = guide.command("adopt-check", source=source or c.source_url, target=target or c.target_url,
                             json_output=True)
        code, out, err = await run_cli(*args, within=300)
        try:
            return code, dict(json.loads(out))
        except ValueError:
            self.figures.troubles.append(f"migrate check exited {code} with no report: {err.strip()[-300:]}")
            return code, {}

    async def adopt(self, forget: str | None = None) -> None:
        """Restart every member onto its agent in the rolling order, but ``forget``; check before
        each step and at the end."""
        c, f = self.cluster, self.figures
        for name in c.rolling_order():
            code, report = await self.check()
            step = {"restarted": name, "ready_before": report.get("ready"), "named_before": named(report)}
            self.say(f"migrate check before restarting {name}: exit {code}, "
                     f"{'ready' if report.get('ready') else 'not ready'}; names {step['named_before']}")
            if report.get("ready") or code != 1:
                f.troubles.append(f"adoption: the check was green (exit {code}) with {name} still on the store")
            if name == forget:
                continue
            await c.restart_member(name, AGENT)
            f.steps.append(step)
        if forget is None:
            f.ready_after = await self._green()

    async def _green(self) -> bool:
        """The check, until green (a stopped member's registration may outlive it for its session
        timeout, an aborted migration's target is emptied in the background); False when it stays
        red within ``GREEN_WITHIN_S``."""
        deadline = time.monotonic() + GREEN_WITHIN_S
        while True:
            code, report = await self.check()
            if code == 0 and report.get("ready"):
                self.say("migrate check: every member behind its agent")
                return True
            if time.monotonic() > deadline:
                self.figures.troubles.append(f"adoption: the check stayed red with every member behind its agent: "
                                             f"{report.get('problems')}")
                return False
            await asyncio.sleep(2.0)

    async def forgotten_member(self, name: str) -> None:
        """With ``name`` left on the store: the check names it, ``start`` refuses and writes
        nothing, ``start --force`` starts with the reason in the flag and ``abort`` takes it back
        (the module's doc); then ``name`` goes behind its agent and the check turns green."""
        c, f = self.cluster, self.figures
        code, report = await self.check()
        process = c.processes[name]
        seen: dict[str, Any] = {"name": name, "check_exit": code, "check_named": named(report)}
        code, _out, err = await run_cli("migrate", "start", "--source", c.source_url, "--target",
                                        c.target_url, within=300)  # fmt: skip
        seen["start_exit"] = code
        seen["start_said"] = [line for line in err.splitlines() if "no agent holds" in line][:3]
        seen["nothing_written"] = await self._nothing_written()
        self.say(f"migrate start with {name} left on the store: exit {code}; nothing written: "
                 f"{seen['nothing_written']}")
        # the forgotten broker at work: admin calls that land on it write into the store directly
        writer = ForgottenWriter(PulsarAdmin(c.web_urls[c.names.index(name)]) if name.startswith("broker") else None)
        await asyncio.to_thread(writer.start)
        try:
            code, _out, err = await run_cli("migrate", "start", "--source", c.source_url, "--target",
                                            c.target_url, "--force", "--reason", FORCE_REASON,
                                            within=FORCED_S)  # fmt: skip
            seen["forced"] = await self._forced_then_aborted(code, err)
        finally:
            await asyncio.to_thread(writer.stop)
        seen["forced_writes"] = writer.writes
        self.say(f"migrate start --force with {name} left on the store: {seen['forced']}")
        f.forgotten = seen
        if not process.running:
            f.troubles.append(f"adoption: {name} stopped while it was left on the store")
        await c.restart_member(name, AGENT)
        f.steps.append({"restarted": name, "ready_before": False, "named_before": seen["check_named"]})
        f.ready_after = await self._green()

    async def _nothing_written(self) -> bool:
        c = self.cluster
        async with await open_store(c.source_url, watch=False, create_root=False) as source:
            flag = await read_flag(source)
        async with await open_store(c.target_url, watch=False) as target:
            empty = [n for n in await target.get_children("/") if n != "zookeeper"] == []
        return flag is None and empty

    async def _forced_then_aborted(self, code: int, err: str) -> dict[str, Any]:
        """``migrate abort`` right after ``start --force`` (exit ``code``) returned, then
        ``status``: the forced migration's end (FAILED, aborted, before COMPLETED), with the flag's
        ``forced`` (the reason, the problems overridden, the sessions let pass)."""
        c = self.cluster
        if code != 0:
            return {"exit": code, "error": err.strip()[-300:]}
        abort_code, _out, abort_err = await run_cli("migrate", "abort", "--source", c.source_url, within=FORCED_S)
        try:
            status, _code = await run_cli_json(["migrate", "status", "--source", c.source_url, "--json"], within=300)
        except RuntimeError as e:
            return {"exit": code, "abort_exit": abort_code, "error": f"{abort_err.strip()[-300:]} {e}".strip()}
        return {"exit": code, "abort_exit": abort_code, "phase": status.get("phase"), "reason": status.get("reason"),
                "forced": status.get("forced")}


class ForgottenWriter:
    """Admin calls landing on the forgotten broker all along (a namespace policy of its own): it
    writes into the store directly, around the agents, as it would for an operator."""

    def __init__(self, admin: PulsarAdmin | None) -> None:
        self.admin = admin
        self.writes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.admin is None:
            return
        with contextlib.suppress(AdminError):
            self.admin.create_namespace(FORGOTTEN_NAMESPACE)
        self._thread = threading.Thread(target=self._run, name="forgotten broker writes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self.admin is not None
        k = 0
        while not self._stop.is_set():
            k += 1
            with contextlib.suppress(AdminError):
                self.admin.set_message_ttl(FORGOTTEN_NAMESPACE, 600 + k)
                self.writes += 1
            self._stop.wait(FORGOTTEN_WRITE_S)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
