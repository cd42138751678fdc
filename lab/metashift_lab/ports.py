"""TCP ports on this machine's loopback: one nobody listens on, and the processes that listen on
one (Linux ``/proc``)."""

from __future__ import annotations

import os
import random
import socket

#: The ports this process handed out: never twice (a server may not have bound its port yet).
_handed_out: set[int] = set()
#: How many ports below the kernel's ephemeral range ``free_port`` draws from.
_SPAN = 16384
#: Linux's default ``ip_local_port_range`` start, when ``/proc`` does not say.
_EPHEMERAL_START = 32768


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_START


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now, below the kernel's ephemeral
    range: a port from that range (``bind(0)``'s) can be taken by any outgoing connection, of any
    process, between this call and the server's bind ("Address already in use")."""
    high = _ephemeral_start()
    low = max(1024, high - _SPAN)
    rng = random.SystemRandom()
    for _ in range(256):
        port = rng.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded range: the kernel's choice
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
