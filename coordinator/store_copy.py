"""A full pass through the store layer, in the coordinator's own process: the copy's other engine
(``coordinator.copy_engine = "store"``). It walks both trees, carries every persistent node with
the delta's ``carry`` (the bulk copy's own judgement, counters and ledger-id generators included)
and checks every path of either side with the delta's ``check``, into the same ``CopyReport`` the
Spark job writes. A node the target holds ahead of the source is taken, as the delta takes it, for
one deleted and created again in the source (the migration alone writes the target), where the
Spark copy reports a conflict. No JVM and no child process: for small trees, the protocol simulator (issue 41)
and the tests of the protocol, where a Spark job's start costs more than the copy; Spark stays
the engine of real trees (the default)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from metashift.copy import delta
from metashift.copy.counters import CounterCheck
from metashift.copy.report import CopyReport, VerifyReport
from metashift.copy.rules import Rules
from metashift.stores import MetadataStoreError, Store, open_store

from .copy_runner import CopyOutcome, ProgressListener

log = logging.getLogger(__name__)


class LeaseExpired(Exception):
    """The coordinator's leader lease ran out while the copy wrote (as the Spark job's own)."""


class StoreCopyRunner:
    """One full pass through the store layer; ``kill`` ends it. The same face as ``CopyRunner``."""

    def __init__(self, source_url: str, target_url: str, rules: Rules, *,
                 lease: Callable[[], float] | None = None) -> None:  # fmt: skip
        """``lease()``: the coordinator's leader lease (a ``time.monotonic()`` deadline): no write
        is made past it."""
        self._source_url = source_url
        self._target_url = target_url
        self._rules = rules
        self._lease = lease
        self._task: asyncio.Task[object] | None = None

    def _fence(self) -> None:
        if self._lease is not None and self._lease() <= time.monotonic():
            raise LeaseExpired("the coordinator's leader lease ran out")

    async def run(self, on_progress: ProgressListener) -> CopyOutcome:
        self._task = asyncio.current_task()
        try:
            source = await open_store(self._source_url, watch=False, create_root=False)
            try:
                target = await open_store(self._target_url, watch=False)
                try:
                    return CopyOutcome(await self._pass(source, target, on_progress))
                finally:
                    await target.close()
            finally:
                await source.close()
        except LeaseExpired as e:
            return CopyOutcome(error=str(e), kind="LeaseExpired")
        except MetadataStoreError as e:
            return CopyOutcome(error=f"{type(e).__name__}: {e}", kind=type(e).__name__)

    async def _pass(self, source: Store, target: Store, on_progress: ProgressListener) -> CopyReport:
        started = time.monotonic()
        rules = self._rules
        nodes, size, ephemerals = [], 0, 0
        async for page in source.walk():
            for info in page:
                if rules.is_excluded(info.path):
                    continue
                if info.ephemeral:
                    ephemerals += 1
                    continue
                nodes.append(info.path)
                size += info.size
        listed = time.monotonic()
        on_progress("copying", 0, len(nodes))
        carried = await delta.carry(source, target, nodes, rules, self._fence)
        on_progress("copying", len(nodes), len(nodes))
        copied = time.monotonic()
        # the target's own nodes too: one the source does not have is a mismatch ("extra")
        # (a ledger-id generator's nodes excepted: the carry may make HOB nodes the source has
        # not made yet; the generator's promise is what the counters' check compares)
        extra = [info.path async for page in target.walk() for info in page
                 if not info.ephemeral and not rules.is_excluded(info.path) and rules.ledger_root_of(info.path) is None]
        wanted = sorted(set(nodes) | set(extra))
        on_progress("verifying", 0, len(wanted))
        checks: dict[str, CounterCheck] = {}
        mismatches = await delta.check(source, target, wanted, rules, checks)
        on_progress("verifying", len(wanted), len(wanted))
        done = time.monotonic()
        source_url, target_url = str(source.url), str(target.url)
        verify = VerifyReport(
            source_url, target_url, nodes=len(wanted), bytes=size, counters=len(checks), counter_checks=checks,
            mismatches=mismatches, seconds=done - copied, nodes_per_second=len(wanted) / max(done - copied, 1e-9),
        )  # fmt: skip
        seconds = done - started
        report = CopyReport(
            source_url, target_url, nodes=len(nodes), bytes=size, written=carried.written,
            unchanged=len(nodes) - carried.written, ephemerals_skipped=ephemerals, write_ops=carried.write_ops,
            write_amplification=carried.write_ops / carried.written if carried.written else 0.0,
            counters=carried.counters, conflicts=carried.conflicts, seconds=seconds,
            nodes_per_second=len(nodes) / max(seconds, 1e-9), listing_seconds=listed - started,
            copy_seconds=copied - listed, verify=verify,
        )  # fmt: skip
        log.info("store-layer pass: %d nodes, %d written, %d mismatches in %.1fs", len(nodes), carried.written,
                 len(mismatches), seconds)
        return report

    def kill(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
