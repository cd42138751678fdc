"""The ``metashift`` command run as an operator runs it, in a child process of this interpreter's
installation (supervised by ``metashift.processes``: its own process group, dead with its parent),
and its JSON report read: for the sandbox, the Pulsar cluster harness, the benchmarks and the tests."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

from metashift import processes


def cli_command(*args: str) -> list[str]:
    """How to run ``metashift ARGS`` with this interpreter's installation."""
    return [sys.executable, "-m", "metashift.cli", *args]


async def run_cli(
    *args: str, within: float | None = None, procs: list[processes.AsyncChild] | None = None,
) -> tuple[int, str, str]:
    """Run ``metashift ARGS`` to its end: (exit status, stdout, stderr). Past ``within`` seconds
    it is killed (with what it started) and the status is -1, stderr saying so. ``procs``, when
    given, gets the child as soon as it runs (for its owner's cleanup)."""
    proc = await processes.start_async(
        cli_command(*args), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    if procs is not None:
        procs.append(proc)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        await processes.kill_async(proc)
        return -1, "", f"metashift {' '.join(args)} did not end within {within:g}s"
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def json_report(args: list[str], code: int, out: str, err: str) -> dict[str, Any]:
    """The JSON object a ``metashift ARGS --json`` run printed (``{}`` for JSON that is not an
    object); ``RuntimeError`` with the last line of its stderr when it printed no JSON."""
    try:
        body = json.loads(out)
    except ValueError:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"metashift {args[0]} exited {code}: {last}") from None
    return body if isinstance(body, dict) else {}


async def run_cli_json(
    args: list[str], procs: list[processes.AsyncChild] | None = None, within: float | None = None,
) -> tuple[dict[str, Any], int]:
    """Run ``metashift ARGS`` (with ``--json``): its JSON report and exit status (``json_report``
    says when there is none)."""
    code, out, err = await run_cli(*args, within=within, procs=procs)
    return json_report(args, code, out, err), code


def run_cli_sync(*args: str, timeout: float | None = None, **popen_kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``run_cli`` for blocking callers (``processes.run``): ``metashift ARGS`` run to its end, by
    default with its output captured as text and no stdin (``popen_kwargs`` override that: env,
    stderr, ...), killed with what it started past ``timeout`` (``subprocess.TimeoutExpired``)."""
    return processes.run(cli_command(*args), timeout=timeout, **popen_kwargs)


def start_cli(*args: str, **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``metashift ARGS`` as a supervised child and return at once (``popen_kwargs`` go to
    ``subprocess.Popen``): for a caller that watches it while it runs."""
    return processes.start(cli_command(*args), **popen_kwargs)
