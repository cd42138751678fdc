"""Processes seen through /proc: what a test started, to check that nothing outlives a run."""

from __future__ import annotations

import os
from pathlib import Path


def starttime(pid: int) -> str | None:
    """The start time of ``pid`` (field 22 of /proc/pid/stat), None when it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    if fields[0] == "Z":
        return None
    return fields[19]


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root`` (pid -> start time)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(text.rpartition(")")[2].split()[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found and (start := starttime(pid)) is not None:
                found[pid] = start
                frontier.append(pid)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
