"""Launches the copy job (``copy_job``) as a child process and follows its JSON lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metashift import processes
from metashift.copy.report import CopyReport, Mismatch
from metashift.copy.rules import Rules

log = logging.getLogger(__name__)

ProgressListener = Callable[[str, int, int], None]
#: Errors of the copy that say a store did not answer (``StoreFull`` is not one: it answered no).
UNREACHABLE_KINDS = frozenset({"StoreUnavailable", "WriteOutcomeUnknown"})
#: The report is one JSON line that lists every mismatch of the verification (while writes flow,
#: one per path changed during the pass): far above asyncio's 64 KiB default line.
REPORT_LINE_LIMIT = 512 * 1024 * 1024
#: How often the coordinator's leader lease is passed on to a running copy job.
LEASE_FEED_SECONDS = 0.2


@dataclass
class CopyOutcome:
    """How the copy ended: its report when it ran to the end, else the error."""

    report: CopyReport | None = None
    error: str = ""
    kind: str = ""
    """The class name of the store error the copy ended with (``StoreUnavailable``, ...)."""

    @property
    def ok(self) -> bool:
        """The copy ran to the end and its verification passed (``CopyReport.passed``)."""
        return self.report is not None and self.report.passed

    @property
    def verified(self) -> bool:
        """The copy ran its verification (whatever it found)."""
        return self.report is not None and self.report.verify is not None

    @property
    def unreachable(self) -> bool:
        """The copy ended because a store did not answer (an outage, perhaps a passing one)."""
        return self.kind in UNREACHABLE_KINDS

    @property
    def conflicts(self) -> list[str]:
        """Nodes the target had ahead of the source (the copy wrote nothing at or below them)."""
        return self.report.conflict_paths if self.report is not None else []

    @property
    def mismatches(self) -> list[Mismatch]:
        """The verification's mismatches."""
        verify = self.report.verify if self.report is not None else None
        return list(verify.mismatches) if verify is not None else []

    def failure(self) -> str:
        """A one-line reason for the flag."""
        if self.error:
            return self.error
        mismatches = self.mismatches
        if mismatches:
            shown = ", ".join(f"{m.path} ({m.kind})" for m in mismatches[:5])
            return f"verification found {len(mismatches)} mismatch(es): {shown}"
        return "verification did not pass"


#: Seconds a job that reported is given to exit on its own (Spark's shutdown) before it is killed.
EXIT_SECONDS = 60.0
#: The jobs that reported and are exiting (held: the loop keeps only weak references to tasks).
_EXITING: set[asyncio.Task[None]] = set()


class CopyRunner:
    """One run of the copy job; ``kill`` ends it (and Spark with it)."""

    def __init__(
        self, source_url: str, target_url: str, master: str | None, rules: Rules | None = None,
        lease: Callable[[], float] | None = None,
    ) -> None:
        """``lease()``: the coordinator's leader lease (a ``time.monotonic()`` deadline), which the
        job may not outlive (``copy_job.LeaseWatch``)."""
        self._job: dict[str, Any] = {"source": source_url, "target": target_url, "master": master}
        if rules is not None:  # the counters' rules (``metashift.copy.rules.configured_rules``)
            self._job.update(ledgers_roots=list(rules.ledgers_roots), counters=list(rules.counters))
        self._lease = lease
        self._proc: processes.AsyncChild | None = None

    async def run(self, on_progress: ProgressListener) -> CopyOutcome:
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # a process group of its own (the job, Spark's JVM), which dies with the agent
        self._proc = await processes.start_async(
            [sys.executable, "-m", "metashift.coordinator.copy_job"],
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, limit=REPORT_LINE_LIMIT,
        )
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        job = dict(self._job, lease_until=self._lease()) if self._lease is not None else self._job
        proc.stdin.write(json.dumps(job).encode() + b"\n")
        await proc.stdin.drain()
        feeding: asyncio.Task[None] | None = None
        if self._lease is None:
            proc.stdin.close()
        else:
            feeding = asyncio.get_running_loop().create_task(self._feed_lease(proc.stdin, self._lease))
        stderr_tail = processes.LineTail(20)

        async def read_stderr() -> None:
            assert proc.stderr is not None
            async for raw in proc.stderr:
                stderr_tail.add(raw)

        stderr_task = asyncio.get_running_loop().create_task(read_stderr())
        outcome: CopyOutcome | None = None
        exiting = False
        code: int | None = None
        try:
            async for raw in proc.stdout:
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue  # not ours (a library printing on stdout)
                if not isinstance(event, dict):
                    continue
                kind = event.get("event")
                if kind == "progress":
                    on_progress(str(event.get("stage", "")), int(event.get("done", 0)), int(event.get("total", 0)))
                elif kind == "report":
                    try:
                        outcome = CopyOutcome(CopyReport.from_dict(event))
                    except (KeyError, TypeError, ValueError) as e:
                        outcome = CopyOutcome(error=f"the copy job's report could not be read "
                                                    f"({type(e).__name__}: {e})")
                elif kind == "error":
                    outcome = CopyOutcome(error=f"copy failed: {event.get('message')}", kind=str(event.get("kind")))
                if outcome is not None:
                    # the job is done: Spark's shutdown (seconds) need not hold the migration up
                    exiting = True
                    break
            if not exiting:
                code = await proc.wait()
                await stderr_task
        finally:
            if exiting:
                task = asyncio.get_running_loop().create_task(self._reap(proc, stderr_task, feeding))
                _EXITING.add(task)
                task.add_done_callback(_EXITING.discard)
            else:
                await self._end(proc, stderr_task, feeding)
        if outcome is None:
            detail = stderr_tail.last()
            outcome = CopyOutcome(error=f"the copy process ended with status {code} ({detail[-300:]})")
        return outcome

    async def _reap(self, proc: processes.AsyncChild, stderr_task: asyncio.Task[None],
                    feeding: asyncio.Task[None] | None) -> None:
        """Let a job that reported exit as it does (Spark stops and removes its files), reading
        what it still prints; killed if it takes longer than ``EXIT_SECONDS``."""
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(EXIT_SECONDS):
                async for _ in proc.stdout:
                    pass
                await proc.wait()
        except TimeoutError:
            log.warning("the copy job did not exit %gs after its report: killed", EXIT_SECONDS)
        finally:
            await self._end(proc, stderr_task, feeding)

    async def _end(self, proc: processes.AsyncChild, stderr_task: asyncio.Task[None],
                   feeding: asyncio.Task[None] | None) -> None:
        """Kill the job if it still runs, and stop reading it and feeding it the lease."""
        if proc.returncode is None:
            self.kill()
            with contextlib.suppress(Exception):
                await proc.wait()
        stderr_task.cancel()
        if feeding is not None:
            feeding.cancel()
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()

    async def _feed_lease(self, stdin: asyncio.StreamWriter, lease: Callable[[], float]) -> None:
        """Pass the lease on while it is renewed (a paused coordinator passes nothing: the job's
        deadline stands)."""
        try:
            while True:
                await asyncio.sleep(LEASE_FEED_SECONDS)
                stdin.write(json.dumps({"lease_until": lease()}).encode() + b"\n")
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return  # the job ended

    def kill(self) -> None:
        """SIGKILL to the job's process group (the job and Spark's JVM)."""
        if self._proc is not None:
            processes.signal_group(self._proc, signal.SIGKILL)
