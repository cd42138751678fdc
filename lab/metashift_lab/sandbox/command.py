"""The ``metashift sandbox`` command: the run its options ask for (simulated clients, or a real
Pulsar with ``--pulsar``), its report printed, and everything it started cleaned up, on Ctrl-C
and SIGTERM too."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

from .options import Options, say
from .run import Sandbox


async def run_sandbox(options: Options) -> int:
    """Run the sandbox and print its report; the exit status (0: COMPLETED, nothing lost,
    verified; 1 otherwise; 130 when interrupted)."""
    sandbox: Any
    if options.pulsar:
        from .pulsar_run import PulsarSandbox  # pulsar-client and the Pulsar release: only for --pulsar

        sandbox = PulsarSandbox(options)
    else:
        sandbox = Sandbox(options)
    loop = asyncio.get_running_loop()
    work = loop.create_task(sandbox.run(), name="sandbox")
    interrupted: list[int] = []

    def on_signal(sig: signal.Signals) -> None:
        if not interrupted:
            interrupted.append(sig)
            say(f"{sig.name}: stopping and cleaning up ...")
            work.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        try:
            report = await work
        except asyncio.CancelledError:
            if not interrupted:
                raise
            return 130
        except sandbox.start_errors as e:
            say(f"error: {e}")
            return 1
        finally:
            await sandbox.cleanup()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if options.json:
        print(json.dumps(report.to_dict(), indent=2), flush=True)
    else:
        print(report.text(), flush=True)
    return 0 if report.ok else 1
