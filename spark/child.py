"""One coroutine of this package run in a child process of the driver.

The driver's own background work (the sequence counters of the top of the tree) is CPU-bound
client work: in a driver thread it would hold the GIL that Spark's py4j calls need, and slow the
start of Spark and the driver's handling of the job. A child interpreter shares no GIL. The job
travels as a pickle on the child's stdin (URLs carry credentials: never on a command line) and
the result comes back the same way on its stdout; the child dies with the driver.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
import time
from typing import Any

from metashift import grpc_env, processes
from metashift.stores.aio import run_loop


class ChildRun:
    """``module.name(*args)`` (a coroutine function) running in a child process."""

    def __init__(self, module: str, name: str, *args: Any) -> None:
        self.started = time.monotonic()
        self.seconds = 0.0
        """How long the coroutine ran in the child."""
        # in the driver's process group: what stops or kills the job's group (a pause, the
        # coordinator's kill) reaches it too; and it dies with the driver
        self._proc = processes.start(
            [sys.executable, "-m", __name__, str(os.getpid())],
            own_group=False,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdin is not None
        self._proc.stdin.write(pickle.dumps((module, name, args)))
        self._proc.stdin.close()

    @property
    def ended_at(self) -> float:
        return self.started + self.seconds

    def result(self) -> Any:
        """Wait for the child; its coroutine's result, or its exception raised here."""
        assert self._proc.stdout is not None
        out = self._proc.stdout.read()
        code = self._proc.wait()
        if code != 0 or not out:
            raise RuntimeError(f"the driver's child process ended with exit status {code}")
        ok, value, self.seconds = pickle.loads(out)
        if not ok:
            raise value
        return value

    def kill(self) -> None:
        """SIGKILL the child (it is in the driver's group: only the child) and reap it."""
        processes.kill(self._proc)


def _main() -> int:
    grpc_env.configure()  # first: nothing has loaded grpc yet
    parent = int(sys.argv[1])
    # Ctrl-C reaches the whole process group: the driver ends this child itself (``kill``)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # die with the driver, even a SIGKILLed one (and not run on if it is already gone: it may have
    # died before the death signal was set)
    processes.set_parent_death_signal()
    if os.getppid() != parent:
        return 1
    module, name, args = pickle.loads(sys.stdin.buffer.read())
    fn = getattr(importlib.import_module(module), name)
    started = time.monotonic()
    ok, value = True, None
    try:
        value = run_loop(fn(*args))
    except Exception as e:  # handed to the driver
        ok, value = False, e
    seconds = time.monotonic() - started
    try:
        data = pickle.dumps((ok, value, seconds))
    except Exception:  # an exception that does not pickle: its text still reaches the driver
        data = pickle.dumps((False, RuntimeError(repr(value)), seconds))
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
