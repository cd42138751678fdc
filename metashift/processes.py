"""Child processes supervised one way, for every place that starts one (the coordinator's copy job,
the Spark driver's child, and the lab's servers, agents and Pulsar JVMs).

The policy, shared by the blocking (``subprocess.Popen``) and the asyncio entry points:

- a child runs in a process group of its own (a new session): a Ctrl-C at the terminal reaches
  the parent only, which then stops its children in order;
- it dies with its parent, even a parent killed by SIGKILL (Linux ``PR_SET_PDEATHSIG``). It is set
  by util-linux's ``setpriv --pdeathsig`` when there is one, so that no Python runs in the forked
  child (unsafe once gRPC's threads run), else by ``prctl`` in a ``preexec_fn``. The signal comes
  when the *thread* that started the child ends: start children from a thread that outlives them;
- it is stopped by SIGTERM to its group, then SIGKILL to the group past a bound;
- its log's tail (a file, or the last lines of a stream) says why it ended.

The lowest layer of the runtime: it imports nothing of metashift.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

#: ``prctl``'s option that names the signal a process gets when its parent (thread) ends.
PR_SET_PDEATHSIG = 1
#: Seconds a child gets after SIGTERM before SIGKILL, unless its owner says otherwise.
STOP_GRACE = 10.0
#: Seconds to wait for a child's exit after SIGKILL (it cannot refuse; only a stuck kernel call holds it).
KILL_WAIT = 10.0
#: Characters of a log file a failure message quotes.
TAIL_CHARS = 3000

__all__ = [
    "KILL_WAIT",
    "PR_SET_PDEATHSIG",
    "STOP_GRACE",
    "TAIL_CHARS",
    "AsyncChild",
    "LineTail",
    "descendants",
    "die_with_parent",
    "kill",
    "kill_async",
    "kill_tree",
    "log_tail",
    "run",
    "set_parent_death_signal",
    "signal_group",
    "start",
    "start_async",
    "stop",
    "stop_async",
]


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)`` for the calling process: it gets ``sig`` when its parent
    ends. ``False`` where that cannot be set (not Linux)."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))) == 0
    except (OSError, AttributeError):
        return False


def _preexec_die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    set_parent_death_signal()


def die_with_parent(command: Sequence[str], *, own_group: bool = True) -> tuple[list[str], dict[str, Any]]:
    """``command`` and the keyword arguments (for ``Popen`` or ``create_subprocess_exec``) that
    start it dying with this process (``setpriv --pdeathsig KILL`` in front of it when util-linux
    is there, else a ``preexec_fn`` that calls ``prctl``), in a session of its own unless
    ``own_group`` is false (a helper its parent's group signals move with, paused or killed)."""
    setpriv = shutil.which("setpriv")
    policy: dict[str, Any] = {"start_new_session": own_group}
    if setpriv:
        return [setpriv, "--pdeathsig", "KILL", "--", *command], policy
    return list(command), {**policy, "preexec_fn": _preexec_die_with_parent}


def start(command: Sequence[str], *, own_group: bool = True, **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``command`` as a supervised child (own process group unless ``own_group`` is false,
    dies with this process); ``popen_kwargs`` go to ``subprocess.Popen`` (stdin, stdout, cwd, env,
    text, ...)."""
    argv, policy = die_with_parent(command, own_group=own_group)
    return subprocess.Popen(argv, **policy, **popen_kwargs)


def run(
    command: Sequence[str], *, timeout: float | None = None, **popen_kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """``command`` run to its end as a supervised child: by default with no stdin and its stdout and
    stderr captured as text (``popen_kwargs`` override that, and go to ``subprocess.Popen``). Past
    ``timeout`` seconds its group is killed and ``subprocess.TimeoutExpired`` raised."""
    options: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                               "text": True, **popen_kwargs}  # fmt: skip
    proc = start(command, **options)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        raise
    return subprocess.CompletedProcess(list(command), proc.returncode, out, err)


class AsyncChild:
    """A child started by ``subprocess.Popen`` and awaited from asyncio, with the part of
    ``asyncio.subprocess.Process`` the callers use (``pid``, ``returncode``, the ``stdin``,
    ``stdout`` and ``stderr`` streams, ``wait``, ``communicate``, signals).

    Not ``loop.subprocess_exec``: uvloop's forks through libuv and runs the interpreter's at-fork
    hooks in the child before ``exec`` (MagicStack/uvloop#749). In a process with other threads
    (gRPC's, a thread pool's) the child can then wait for ever on a lock or the GIL a thread of
    the parent held at the fork, spinning a core: a ``metashift`` status check from the sandbox
    was seen so for minutes (185 s of CPU). ``Popen`` (``_posixsubprocess``) runs no Python in
    the child when there is no ``preexec_fn``."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._exited: asyncio.Future[int] | None = None

    async def _connect(self, limit: int) -> None:
        loop = asyncio.get_running_loop()
        popen = self._popen
        if popen.stdin is not None:
            transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, popen.stdin)
            self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        if popen.stdout is not None:
            self.stdout = await _reader(popen.stdout, limit)
        if popen.stderr is not None:
            self.stderr = await _reader(popen.stderr, limit)

    @property
    def returncode(self) -> int | None:
        """The exit status once the child ended (reaped on reading), else ``None``."""
        return self._popen.poll()

    async def wait(self) -> int:
        """Wait for the child to end; its exit status."""
        code = self._popen.poll()
        if code is not None:
            return code
        if self._exited is None:
            self._exited = self._watch()
        return await asyncio.shield(self._exited)

    def _watch(self) -> asyncio.Future[int]:
        """A future of the exit status: told by a pidfd when the kernel has one, else by a thread."""
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            return asyncio.ensure_future(asyncio.to_thread(self._popen.wait))
        exited: asyncio.Future[int] = loop.create_future()

        def readable() -> None:
            code = self._popen.poll()
            if code is None:
                return
            loop.remove_reader(fd)
            os.close(fd)
            if not exited.done():
                exited.set_result(code)

        loop.add_reader(fd, readable)
        readable()  # it may have ended between poll and pidfd_open
        return exited

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]:
        """Write ``input`` (then close stdin), read stdout and stderr to their ends, wait."""
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
                with contextlib.suppress(ConnectionError):
                    await self.stdin.drain()
            self.stdin.close()
        out, err = await asyncio.gather(_read_all(self.stdout), _read_all(self.stderr))
        await self.wait()
        return out, err

    def send_signal(self, sig: int) -> None:
        self._popen.send_signal(sig)

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()


async def _read_all(stream: asyncio.StreamReader | None) -> bytes:
    return b"" if stream is None else await stream.read()


async def _reader(pipe: Any, limit: int) -> asyncio.StreamReader:
    """A stream reading ``pipe`` (a child's stdout or stderr) on the running loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    await loop.connect_read_pipe(lambda: protocol, pipe)
    return reader


async def start_async(command: Sequence[str], *, own_group: bool = True, limit: int = 2**16,
                      **kwargs: Any) -> AsyncChild:
    """``start`` for asyncio (``AsyncChild``: never uvloop's fork); ``kwargs`` go to
    ``subprocess.Popen`` (stdin, stdout, stderr as ``asyncio.subprocess.PIPE`` and the like, cwd,
    env); ``limit`` bounds a line read from its streams, as for ``create_subprocess_exec``."""
    argv, policy = die_with_parent(command, own_group=own_group)
    # Popen returns once the child has exec'd (or failed to): a fork and an exec, not a wait
    child = AsyncChild(subprocess.Popen(argv, **policy, **kwargs))  # noqa: ASYNC220
    try:
        await child._connect(limit)
    except BaseException:
        kill(child._popen)
        raise
    return child


Child: TypeAlias = subprocess.Popen[Any] | AsyncChild


def _running(proc: Child) -> bool:
    if isinstance(proc, subprocess.Popen):
        return proc.poll() is None
    return proc.returncode is None


def signal_group(proc: Child, sig: int) -> bool:
    """Send ``sig`` to the child's process group (the child and whatever it started) when it leads
    one, else to the child alone (``own_group=False``: its group is its parent's), unless the child
    was already reaped (its pid may be another's by now). Whether it was sent."""
    if not _running(proc):
        return False
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop(proc: subprocess.Popen[Any], grace: float = STOP_GRACE) -> int | None:
    """SIGTERM to the child's group, SIGKILL to it past ``grace`` seconds; its exit status
    (``None`` if it survived even SIGKILL for ``KILL_WAIT`` seconds)."""
    signal_group(proc, signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        return kill(proc)


def kill(proc: subprocess.Popen[Any]) -> int | None:
    """SIGKILL to the child's group (like a crash); its exit status, ``None`` if it did not end
    within ``KILL_WAIT`` seconds."""
    signal_group(proc, signal.SIGKILL)
    try:
        return proc.wait(timeout=KILL_WAIT)
    except subprocess.TimeoutExpired:
        return None


async def stop_async(proc: AsyncChild, grace: float = STOP_GRACE) -> int | None:
    """``stop`` for asyncio."""
    signal_group(proc, signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        return await kill_async(proc)


async def kill_async(proc: AsyncChild) -> int | None:
    """``kill`` for asyncio."""
    signal_group(proc, signal.SIGKILL)
    try:
        return await asyncio.wait_for(proc.wait(), KILL_WAIT)
    except TimeoutError:
        return None


def log_tail(path: str | os.PathLike[str], chars: int = TAIL_CHARS) -> str:
    """The last ``chars`` characters of a child's log file, ``''`` when it cannot be read."""
    try:
        return Path(path).read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class LineTail:
    """The last lines a child wrote on a stream (its stderr, read as it comes)."""

    def __init__(self, lines: int = 20) -> None:
        self.lines: deque[str] = deque(maxlen=lines)

    def add(self, raw: bytes | str) -> None:
        """Keep one line (decoded if bytes, its end of line stripped)."""
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        self.lines.append(text.rstrip())

    def last(self) -> str:
        """The last line that is not blank, ``''`` when there is none."""
        return next((line for line in reversed(self.lines) if line.strip()), "")


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``, found through ``/proc`` (pid -> its start time, field 22
    of ``/proc/<pid>/stat``: with the pid, a process's identity). Zombies are left out."""
    parents: dict[int, int] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) < 20:
            continue
        parents[int(entry)] = int(fields[1])
        if fields[0] != "Z":
            starts[int(entry)] = fields[19]
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found and pid in starts:
                found[pid] = starts[pid]
                frontier.append(pid)
    return found


def kill_tree(root: int | None = None) -> None:
    """SIGKILL every process below ``root`` (this process by default), whatever group each is in,
    then ``root`` itself."""
    root = os.getpid() if root is None else root
    for pid in descendants(root):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(root, signal.SIGKILL)
