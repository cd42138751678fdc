"""One JVM of the Pulsar release as a child process: its own session (a Ctrl-C reaches the launcher,
which stops it in order), SIGKILL when the launcher dies, and its output in a log file."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from pathlib import Path

from metashift import processes

#: Seconds a JVM gets after SIGTERM before SIGKILL.
STOP_GRACE = 20.0


class ProcessStartError(RuntimeError):
    """A Pulsar process exited or did not get ready in time (its log's tail in the message)."""

    pass


class JavaProcess:
    """A Pulsar JVM (broker, bookie, or a one-shot tool such as PulsarClusterMetadataSetup)."""

    def __init__(self, name: str, command: list[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.command = command
        self.log_path = log_path
        self.cwd = cwd
        self.process: processes.AsyncChild | None = None
        self.started = 0.0
        """Wall clock (s) of the last start."""
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        self.cwd.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:  # noqa: ASYNC230 - a local file, opened once
            self.process = await processes.start_async(
                self.command, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                cwd=self.cwd,
            )  # fmt: skip
        self.started = time.time()
        self.starts += 1

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, chars: int = 4000) -> str:
        return processes.log_tail(self.log_path, chars)

    async def wait_for_line(self, pattern: str, within: float, *, since: int = 0) -> None:
        """Return once a line matching ``pattern`` is in the log (after byte ``since``); raise
        ``ProcessStartError`` if the process exits first or ``within`` seconds pass."""
        wanted = re.compile(pattern)
        deadline = time.monotonic() + within
        while True:
            if wanted.search(self.log_text()[since:]):
                return
            if not self.running:
                code = self.process.returncode if self.process else None
                raise ProcessStartError(f"{self.name} exited ({code}) before getting ready; log {self.log_path}:\n"
                                        + self.log_tail())  # fmt: skip
            if time.monotonic() > deadline:
                raise ProcessStartError(f"{self.name} not ready within {within:g}s; log {self.log_path}:\n"
                                        + self.log_tail())  # fmt: skip
            await asyncio.sleep(0.25)

    async def run_to_end(self, within: float) -> int:
        """For a one-shot tool: its exit status (``ProcessStartError`` when it takes longer)."""
        await self.start()
        assert self.process is not None
        try:
            return await asyncio.wait_for(self.process.wait(), within)
        except TimeoutError:
            await self.stop(grace=1.0)
            raise ProcessStartError(f"{self.name} did not finish within {within:g}s; log {self.log_path}:\n"
                                    + self.log_tail()) from None  # fmt: skip

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the JVM's process group."""
        if self.process is not None:
            processes.signal_group(self.process, sig)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM (Pulsar shuts down in order: bundles released, ledgers closed), SIGKILL after
        ``grace`` seconds. Never raises."""
        if self.process is not None:
            with contextlib.suppress(Exception):
                await processes.stop_async(self.process, grace)
