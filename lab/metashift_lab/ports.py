"""TCP ports on this machine's loopback: one nobody listens on, and the processes that listen on
one (Linux ``/proc``)."""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(port: int) -> bool:
    """A connection to ``127.0.0.1:port`` is accepted now."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def listener_pids(port: int, ours: int | None = None) -> set[int]:
    """The processes listening on TCP ``port`` (Linux ``/proc``), among ``ours`` only when given
    (cheaper). Without ``/proc``: ``{ours}`` (nothing better to go on)."""
    inodes: set[str] = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f.read().splitlines()[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                        inodes.add(f"socket:[{fields[9]}]")
    except OSError:
        return set() if ours is None else {ours}
    pids = [ours] if ours is not None else [int(p) for p in os.listdir("/proc") if p.isdigit()]
    found: set[int] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    found.add(pid)
                    break
        except OSError:
            continue
    return found
